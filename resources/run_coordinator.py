"""The instance's run coordinator: Dagster's QueuedRunCoordinator, which first gives a fine-tuning run the
platform's tags it was submitted without.

Sensors set every tag themselves: the pool their routing chose, the attempt number, the tier's priority. A
run launched by hand (the UI's Launchpad, ``dagster job launch``) carries only its partition, and without a
pool tag no pool limit would hold it back; so before it is queued it gets what the upload sensor gives a
first attempt. Tags already on a run are never changed. (Dagster's run-attribution example tags runs in a
QueuedRunCoordinator subclass the same way.)

This cannot be the job's ``tags_for_partition_key_fn``: Dagster lets a partition's tags override those of a
sensor's run request, which would turn every retry back into attempt 1 and every routed job to the default
pool.
"""

from __future__ import annotations

from dagster import DagsterRun, QueuedRunCoordinator, SubmitRunContext

from ftpipe.tenants import load_platform_config
from partitions.keys import parse_partition_key
from resources.settings import tenants_file
from sensors.run_tags import FINETUNE_JOB, PARTITION_TAG, run_tags


def missing_platform_tags(run: DagsterRun) -> dict[str, str]:
    if run.job_name != FINETUNE_JOB or PARTITION_TAG not in run.tags:
        return {}
    tenant, job = parse_partition_key(run.tags[PARTITION_TAG])
    platform = load_platform_config(tenants_file())
    return {k: v for k, v in run_tags(platform, tenant, job).items() if k not in run.tags}


class PlatformRunCoordinator(QueuedRunCoordinator):
    def submit_run(self, context: SubmitRunContext) -> DagsterRun:
        missing = missing_platform_tags(context.dagster_run)
        if missing:
            self._instance.add_run_tags(context.dagster_run.run_id, missing)
            run = self._instance.get_run_by_id(context.dagster_run.run_id)
            context = SubmitRunContext(run, context.workspace)
        return super().submit_run(context)
