"""The second stage of a tenant job: once its prepare run has succeeded, queue the finetune run that holds a
slot of the job's GPU pool.

The pre-flight (``tokenized_dataset``) settled what the GPU run needs, and its materialization says it: the
pool (admission's routing) and the seconds the run is expected to hold the slot, which preemption reads. So
the finetune run is queued with every tag it needs, and nothing tags a run while it runs.
"""

from __future__ import annotations

from dagster import (
    AssetKey,
    DagsterEventType,
    DagsterInstance,
    DagsterRunStatus,
    DefaultSensorStatus,
    RunRequest,
    RunStatusSensorContext,
    SkipReason,
    run_status_sensor,
)

from ft_assets.jobs import finetune_job, prepare_job
from partitions.run_tags import CANCEL_REQUESTED_TAG, PARTITION_TAG, ROUTED_POOL_TAG, finetune_tags

PREFLIGHT_ASSET = AssetKey("tokenized_dataset")


def preflight_metadata(instance: DagsterInstance, run_id: str) -> dict | None:
    """The pre-flight's metadata as the prepare run ``run_id`` recorded it, or None if it did not get there."""
    for record in instance.all_logs(run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION):
        materialization = record.asset_materialization
        if materialization is not None and materialization.asset_key == PREFLIGHT_ASSET:
            return {k: v.value for k, v in materialization.metadata.items()}
    return None


# Every 5 s, as the upload sensor: a prepared job waits for its GPU run no longer than a new upload waits.
@run_status_sensor(run_status=DagsterRunStatus.SUCCESS, monitored_jobs=[prepare_job], request_job=finetune_job,
                   minimum_interval_seconds=5, default_status=DefaultSensorStatus.RUNNING)
def queue_finetune_runs(context: RunStatusSensorContext):
    run = context.dagster_run
    if run.tags.get(CANCEL_REQUESTED_TAG):
        return SkipReason(f"run {run.run_id}'s job was cancelled before its GPU run was queued")
    preflight = preflight_metadata(context.instance, run.run_id)
    if preflight is None:  # a hand launch of part of the stage: nothing to train on yet
        return SkipReason(f"run {run.run_id} did not materialize {PREFLIGHT_ASSET.to_user_string()}")
    pool = str(preflight.get("pool") or run.tags.get(ROUTED_POOL_TAG, ""))
    expected = float(preflight.get("expected_seconds", "nan"))
    return RunRequest(run_key=f"{run.run_id}:finetune", partition_key=run.tags.get(PARTITION_TAG),
                      tags=finetune_tags(run.tags, pool, expected, run.run_id))
