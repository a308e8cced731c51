"""A run launcher for queue tests: launches nothing, and on terminate marks the run canceling then canceled,
as a real run worker does once its trainer has checkpointed and exited."""

from dagster._core.test_utils import MockedRunLauncher


class StoppableRunLauncher(MockedRunLauncher):
    terminated: list[str] = []

    def terminate(self, run_id):
        run = self._instance.get_run_by_id(run_id)
        self._instance.report_run_canceling(run)
        self._instance.report_run_canceled(run)
        StoppableRunLauncher.terminated.append(run_id)
        return True
