"""The instance's run coordinator: Dagster's QueuedRunCoordinator, which first checks a tenant job's run and
gives it the platform's tags.

Sensors set every tag themselves: the pool their routing chose, the attempt number, the tier's priority. A
run launched by hand (the UI's Materialize dialog or Launchpad, GraphQL, ``dagster job launch``) carries only
its partition, and without a pool tag no pool limit would hold it back. So before any run of a tenant job is
queued:

- a run without a partition, or for a partition whose tenant is unknown or that has no upload, is refused:
  the launch fails with the reason (the UI shows it in its error dialog), and the run is marked failed,
  tagged as the user's error, so that nothing retries it;
- a hand launch is admitted as the upload sensor admits a manifest (``ftpipe.admission``): routed to the pool
  the sensor would choose (a prepare run names it, any other holds its slot), refused for what the sensor
  would refuse, and numbered as the next attempt of its job for the partition.

Every other run is the platform's own (serving refresh, billing, re-evaluation, retention): it is tagged
``ftpipe/kind=maintenance`` and goes first, in the share of the run cap that tenants' jobs cannot take.

Tags already on a run are never changed. (Dagster's run-attribution example tags runs in a
QueuedRunCoordinator subclass the same way.) This cannot be the job's ``tags_for_partition_key_fn``: Dagster
lets a partition's tags override those of a sensor's run request, which would turn every retry back into
attempt 1 and every routed job to the default pool.
"""

from __future__ import annotations

from dagster import DagsterInstance, DagsterRun, QueuedRunCoordinator, RunsFilter, SubmitRunContext

from ftpipe.admission import admit
from ftpipe.landing import manifest_key
from ftpipe.manifest import MAX_MANIFEST_BYTES
from ftpipe.objectstore import ObjectTooLarge, UnsafeObject
from partitions.keys import InvalidName, parse_partition_key
from partitions.run_tags import (
    ATTEMPT_TAG,
    ERROR_CLASS_TAG,
    FINETUNE_JOB,
    KIND_TAG,
    MAINTENANCE,
    OUTCOME_TAG,
    PARTITION_TAG,
    PREPARE_JOB,
    PRIORITY_TAG,
    REFUSED_LAUNCH_TAG,
    TENANT_JOB,
    TENANT_JOBS,
    outcome_tag_value,
    run_tags,
)
from resources.settings import resources_from_env

PREPARE_ASSETS = frozenset({"raw_dataset", "validated_dataset", "tokenized_dataset"})
TENANT_JOB_ASSETS = PREPARE_ASSETS | {"adapter", "eval_report", "registered_adapter"}
"""The assets partitioned by tenant job, and those of them that need no GPU (tests/test_layering.py checks
both against the definitions)."""
MAINTENANCE_PRIORITY = 100
"""Above every tier's: a maintenance run is small, and serving refresh must not wait behind tenants' jobs."""


class LaunchRefused(Exception):
    """A run of a tenant job that must not queue; the message says why, for the operator who launched it."""


def _selected(run: DagsterRun) -> set[str]:
    return {key.to_user_string() for key in (run.asset_selection or ())}


def is_tenant_job_run(run: DagsterRun) -> bool:
    return run.job_name in TENANT_JOBS or bool(_selected(run) & TENANT_JOB_ASSETS)


def stage_of(run: DagsterRun) -> str:
    """``prepare`` for a run that needs no GPU; any other tenant job's run holds a slot of its pool."""
    selected = _selected(run)
    cpu_only = run.job_name == PREPARE_JOB or (run.job_name not in TENANT_JOBS and selected <= PREPARE_ASSETS)
    return PREPARE_JOB if cpu_only else FINETUNE_JOB


def tags_for_tenant_job_run(run: DagsterRun, instance: DagsterInstance, resources: dict) -> dict[str, str]:
    """The tags to add before ``run`` queues; raises LaunchRefused when it must not queue at all."""
    key = run.tags.get(PARTITION_TAG)
    if not key:
        raise LaunchRefused("a run of a tenant job needs a partition (tenant__job): launch it from the partition's "
                            "page, or let the upload sensor queue it")
    try:
        tenant, job = parse_partition_key(key)
    except InvalidName as exc:
        raise LaunchRefused(f"partition {key!r}: {exc}") from None
    config = resources["platform"].config()
    if tenant not in config.tenants:
        raise LaunchRefused(f"partition {key!r}: tenant '{tenant}' is not configured on this platform")
    store = resources["landing"].store()
    manifest = manifest_key(tenant, job)
    try:
        manifest_bytes = store.read_bytes(manifest, max_bytes=MAX_MANIFEST_BYTES) if store.stat(manifest) else None
    except (UnsafeObject, ObjectTooLarge) as exc:
        raise LaunchRefused(f"partition {key!r}: {exc}") from None
    if manifest_bytes is None:
        raise LaunchRefused(f"partition {key!r} has no upload: {manifest} is not in the landing zone")
    if ATTEMPT_TAG in run.tags:
        return {KIND_TAG: TENANT_JOB}  # queued by a sensor, which routed and numbered it
    admission = admit(manifest_bytes, manifest, config, resources["base_models"].registry())
    if admission.refusal:
        raise LaunchRefused(f"partition {key!r}: {admission.refusal}")
    assert admission.pool is not None  # admit() names a pool for every job it does not refuse
    earlier = instance.get_runs(RunsFilter(job_name=run.job_name, tags={PARTITION_TAG: key}))
    attempt = 1 + max((int(r.tags.get(ATTEMPT_TAG, "0")) for r in earlier if r.run_id != run.run_id), default=0)
    tags = run_tags(config, tenant, job, admission.pool, attempt, stage_of(run))
    return {k: v for k, v in tags.items() if k not in run.tags}


class PlatformRunCoordinator(QueuedRunCoordinator):
    def submit_run(self, context: SubmitRunContext) -> DagsterRun:
        run = context.dagster_run
        if is_tenant_job_run(run):
            try:
                missing = tags_for_tenant_job_run(run, self._instance, resources_from_env())
            except LaunchRefused as exc:
                # Tagged as the user's error first, so the failure sensor does not retry what was refused.
                self._instance.add_run_tags(run.run_id, {OUTCOME_TAG: outcome_tag_value(f"refused: {exc}", "user"),
                                                         ERROR_CLASS_TAG: "user", REFUSED_LAUNCH_TAG: "true"})
                raise
        else:
            # The platform's own runs have their share of the run cap, which tenants' jobs cannot take.
            missing = {KIND_TAG: MAINTENANCE, PRIORITY_TAG: str(MAINTENANCE_PRIORITY)}
        missing = {k: v for k, v in missing.items() if k not in run.tags}
        if missing:
            self._instance.add_run_tags(run.run_id, missing)
            tagged = self._instance.get_run_by_id(run.run_id)
            assert tagged is not None  # the run being submitted is stored: its tags were just added
            context = SubmitRunContext(tagged, context.workspace)
        return super().submit_run(context)
