"""A run launcher whose first launch of initech's GPU run fails the way a shutting-down code server's does."""

from dagster._core.errors import DagsterLaunchFailedError

from resources.run_launcher import LocalRunLauncher


class FailsFirstLaunch(LocalRunLauncher):
    def launch_run(self, context) -> None:
        run = context.dagster_run
        if ((run.tags.get("ftpipe/tenant"), run.job_name, run.tags.get("ftpipe/attempt"))
                == ("initech", "finetune", "1")):
            raise DagsterLaunchFailedError("Tried to start a run on a server after telling it to shut down")
        super().launch_run(context)
