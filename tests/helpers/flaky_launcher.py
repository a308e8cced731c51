"""A run launcher whose first launch of initech's job fails the way a shutting-down code server's does."""

from dagster._core.errors import DagsterLaunchFailedError

from resources.run_launcher import LocalRunLauncher


class FailsFirstLaunch(LocalRunLauncher):
    def launch_run(self, context) -> None:
        run = context.dagster_run
        if run.tags.get("ftpipe/tenant") == "initech" and run.tags.get("ftpipe/attempt") == "1":
            raise DagsterLaunchFailedError("Tried to start a run on a server after telling it to shut down")
        super().launch_run(context)
