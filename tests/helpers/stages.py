"""A tenant job's two runs in process, chained as the daemon chains them: ``prepare``, then the ``finetune`` run
that the real ``queue_finetune_runs`` sensor requests for it, with that request's tags."""

from __future__ import annotations

from dataclasses import dataclass

from dagster import DagsterEventType, DagsterInstance, RunRequest, build_run_status_sensor_context

from sensors.stages import queue_finetune_runs


@dataclass
class StagedResult:
    """The results of the stages that ran, read as one (the last decides success and the run)."""
    results: list

    @property
    def success(self) -> bool:
        return all(r.success for r in self.results)

    @property
    def run_id(self) -> str:
        return self.results[-1].run_id

    @property
    def all_events(self) -> list:
        return [e for r in self.results for e in r.all_events]

    def asset_materializations_for_node(self, node: str) -> list:
        return [m for r in self.results for m in r.asset_materializations_for_node(node)]

    def get_asset_check_evaluations(self) -> list:
        return [e for r in self.results for e in r.get_asset_check_evaluations()]


def finetune_request(instance: DagsterInstance, prepare_run_id: str):
    """What the stage sensor answers for a finished prepare run: a RunRequest, or a SkipReason."""
    run = instance.get_run_by_id(prepare_run_id)
    (record,) = instance.all_logs(prepare_run_id, of_type=DagsterEventType.RUN_SUCCESS)
    return queue_finetune_runs(build_run_status_sensor_context(
        sensor_name=queue_finetune_runs.name, dagster_instance=instance, dagster_run=run,
        dagster_event=record.dagster_event))


def execute_stages(defs, instance: DagsterInstance, partition_key: str, tags: dict | None = None) -> StagedResult:
    prepare = defs.resolve_job_def("prepare").execute_in_process(
        instance=instance, partition_key=partition_key, raise_on_error=False, tags=tags)
    if not prepare.success:
        return StagedResult([prepare])
    request = finetune_request(instance, prepare.run_id)
    assert isinstance(request, RunRequest), request
    finetune = defs.resolve_job_def("finetune").execute_in_process(
        instance=instance, partition_key=request.partition_key, raise_on_error=False, tags=request.tags)
    return StagedResult([prepare, finetune])
