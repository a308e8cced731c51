"""Classify failed runs and resume the ones that failed for the platform's reasons, not the tenant's.

Dagster's own run retries (``run_retries`` in dagster.yaml) would re-run with the parent's tags and config, so
a retry could neither count its attempt, nor be metered apart, nor tell a tenant's bad input from a lost
node. This sensor does all three, for every way a run can fail: a step's failure, a launch that never
started (a code server shutting down), a run worker that died (run monitoring fails its run), in either of a
job's two stages: a retry is a run of the same stage, so a lost GPU run does not prepare its data again.
Every failed run gets its outcome tag (``ftpipe/outcome``), so the Runs list says why it failed.
"""

import re
from datetime import datetime, timezone

from dagster import (
    AssetCheckSeverity,
    DagsterEventType,
    DagsterInstance,
    DagsterRun,
    DefaultSensorStatus,
    RunFailureSensorContext,
    SkipReason,
    run_failure_sensor,
)

from ft_assets.jobs import finetune_job, prepare_job
from ft_assets.partition import ERROR_CLASS_KEY, PLATFORM_ERROR, USER_ERROR
from ftpipe.metering.classify import LOST
from ftpipe.metering.ledger import UsageRecord
from partitions.run_tags import (
    ATTEMPT_TAG,
    ERROR_CLASS_TAG,
    JOB_TAG,
    OUTCOME_TAG,
    POOL_TAG,
    REFUSED_LAUNCH_TAG,
    TENANT_TAG,
    outcome_tag_value,
)
from resources import ArtifactStoreResource, CatalogResource, PlatformResource
from sensors.attempts import next_attempt
from sensors.notifications import run_notice, send

MAX_ATTEMPTS = 3
TRAINING_STEP = "adapter"


def _notify_failed(context: RunFailureSensorContext, platform: PlatformResource, artifacts: ArtifactStoreResource,
                   run: DagsterRun, error_class: str, reason: str) -> None:
    """The tenant hears of a failure once, when it is final: not of a platform failure that will be resumed. A
    run that stopped at a failed quality gate left its own notice (job.gate_failed, with gates and advice)."""
    notice = run_notice(artifacts, run) if error_class == USER_ERROR else None
    send(context.log.info, platform, run, *(notice or ("job.failed", {
        "job": run.tags.get(JOB_TAG), "run_id": run.run_id, "error_class": error_class, "reason": reason})))


def failure_reason(instance: DagsterInstance, run: DagsterRun) -> tuple[str, str]:
    """(error class, reason) of a failed run: ``user`` for bad input or a failed quality gate.

    A step that fails on the tenant's input says why in its Failure (the whole reason; the outcome tag holds
    its first line); a blocking check that failed without one is the tenant's too; a run refused before any
    step (the run coordinator) has only its tags."""
    failed_check = None
    for record in instance.all_logs(run.run_id, of_type={DagsterEventType.ASSET_CHECK_EVALUATION,
                                                           DagsterEventType.STEP_FAILURE}):
        event = record.get_dagster_event()  # of_type keeps only Dagster events, so there is always one
        if event.event_type == DagsterEventType.ASSET_CHECK_EVALUATION:
            evaluation = event.asset_check_evaluation_data
            # Only a failed ERROR check stops a run; WARN checks (data-quality warnings) never do.
            if failed_check is None and not evaluation.passed and evaluation.severity == AssetCheckSeverity.ERROR:
                failed_check = f"check {evaluation.check_name} failed: {evaluation.description or ''}".strip()
            continue
        data = event.step_failure_data
        user = data.user_failure_data
        if user is not None:
            meta = user.metadata or {}
            return getattr(meta.get(ERROR_CLASS_KEY), "value", PLATFORM_ERROR), user.description or "failed"
        if failed_check:
            return USER_ERROR, failed_check
        message = data.error.message.strip() if data.error else "failed"
        return PLATFORM_ERROR, f"step {record.step_key}: {message.splitlines()[0][:300]}"
    if failed_check:
        return USER_ERROR, failed_check
    if run.tags.get(ERROR_CLASS_TAG) == USER_ERROR:
        return USER_ERROR, run.tags.get(OUTCOME_TAG, "").removeprefix(f"[{USER_ERROR}] ") or "refused"
    return PLATFORM_ERROR, _run_level_reason(instance, run)


def _run_level_reason(instance: DagsterInstance, run: DagsterRun) -> str:
    """Why a run failed that no step reported: its launch failed (the daemon's engine event carries the error),
    or its run worker died (run monitoring or the code server say so)."""
    steps_done = sum(1 for _ in instance.all_logs(run.run_id, of_type=DagsterEventType.STEP_SUCCESS))
    where = f"after {steps_done} finished step(s)" if steps_done else "before any step finished"
    records = list(reversed(instance.all_logs(run.run_id, of_type={DagsterEventType.ENGINE_EVENT,
                                                                   DagsterEventType.RUN_FAILURE})))
    for record in records:  # an error that Dagster caught says the most
        error = getattr(record.get_dagster_event().event_specific_data, "error", None)
        if error is not None and error.message.strip():
            return f"{error.message.strip().splitlines()[0][:300]} ({where})"
    for record in records:
        message = (record.message or "").strip()
        worker = _WORKER_STATUS.search(message)
        if worker:
            return f"{worker.group(1)} ({where})"
        if message and not message.startswith(_UNINFORMATIVE):
            return f"{message.splitlines()[0][:300]} ({where})"
    return f"the run failed {where}"


_WORKER_STATUS = re.compile(r"Detected run worker status \w+: '(.*?)'")
_UNINFORMATIVE = ("Execution of run", "Started process", "Process for run", "This run has been marked as failed")


def meter_lost_attempt(instance: DagsterInstance, run: DagsterRun, platform: PlatformResource,
                       catalog: CatalogResource) -> UsageRecord | None:
    """A run whose worker died while training never wrote its usage: the slot was held from the training
    step's start to the run's end, at the platform's cost. A run that did write it is left alone."""
    ledger = catalog.ledger()
    started = next((r.timestamp for r in instance.all_logs(run.run_id, of_type=DagsterEventType.STEP_START)
                    if r.step_key == TRAINING_STEP), None)
    if started is None or ledger.has(run.run_id):
        return None
    record = instance.get_run_record_by_id(run.run_id)
    ended = record.end_time if record and record.end_time else started
    config = platform.config()
    pool_name = run.tags.get(POOL_TAG, config.default_pool)
    pool = config.pools.get(pool_name)
    usage = UsageRecord.measure(
        run.run_id, run.tags.get(TENANT_TAG, ""), run.tags.get(JOB_TAG, ""), int(run.tags.get(ATTEMPT_TAG, "1")),
        pool_name, pool.gpus_per_slot if pool else 1, pool.price_per_gpu_hour if pool else 0.0,
        datetime.fromtimestamp(started, timezone.utc), datetime.fromtimestamp(ended, timezone.utc), LOST,
        reason="the run ended without the training step reporting its usage")
    return usage if ledger.record(usage) else None


@run_failure_sensor(monitored_jobs=[prepare_job, finetune_job], request_jobs=[prepare_job, finetune_job],
                    minimum_interval_seconds=10, default_status=DefaultSensorStatus.RUNNING)
def resume_failed_runs(context: RunFailureSensorContext, platform: PlatformResource, catalog: CatalogResource,
                       artifacts: ArtifactStoreResource):
    run = context.dagster_run
    if run.tags.get(REFUSED_LAUNCH_TAG):  # an operator's launch with nothing to run: no job, no tenant to tell
        return SkipReason(f"run {run.run_id} was refused at launch: {run.tags.get(OUTCOME_TAG, '')}")
    lost = meter_lost_attempt(context.instance, run, platform, catalog)
    if lost:
        context.log.info(f"metered a lost attempt of {run.run_id}: {lost.gpu_seconds:.1f} GPU-seconds, refunded")
    error_class, reason = failure_reason(context.instance, run)
    attempt = int(run.tags.get(ATTEMPT_TAG, "1"))
    if will_resume(run, error_class):
        _tag_outcome(context, run, error_class, f"resumed as attempt {attempt + 1}: {reason}")
        return next_attempt(run, run_key=f"{run.run_id}:resume")
    if error_class == USER_ERROR:
        _tag_outcome(context, run, error_class, reason)
        _notify_failed(context, platform, artifacts, run, error_class, reason)
        return SkipReason(f"run {run.run_id} failed on the tenant's input, not retried: {reason}")
    _tag_outcome(context, run, error_class, f"gave up after {attempt} attempts: {reason}")
    _notify_failed(context, platform, artifacts, run, error_class, reason)
    return SkipReason(f"run {run.run_id} failed {attempt} times; giving up: {reason}")


def will_resume(run: DagsterRun, error_class: str) -> bool:
    """Whether this sensor starts another attempt of the failed run: a platform failure with attempts left. The
    job's state reads it too, so that a client polling for a final status does not stop at a failure that the
    next attempt will carry on from."""
    return (not run.tags.get(REFUSED_LAUNCH_TAG) and error_class != USER_ERROR
            and int(run.tags.get(ATTEMPT_TAG, "1")) < MAX_ATTEMPTS)


def _tag_outcome(context: RunFailureSensorContext, run: DagsterRun, error_class: str, reason: str) -> None:
    if OUTCOME_TAG not in run.tags:  # a step that decided the failure has said it better already
        context.instance.add_run_tags(run.run_id, {OUTCOME_TAG: outcome_tag_value(reason, error_class),
                                                   ERROR_CLASS_TAG: error_class})
