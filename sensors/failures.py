"""Classify failed runs and resume the ones that failed for the platform's reasons, not the tenant's."""

from datetime import datetime, timezone

from dagster import (
    AssetCheckSeverity,
    DagsterEventType,
    DagsterInstance,
    DagsterRun,
    RunFailureSensorContext,
    SkipReason,
    run_failure_sensor,
)

from ft_assets.jobs import finetune_job
from ft_assets.partition import ERROR_CLASS_KEY, PLATFORM_ERROR, USER_ERROR
from ftpipe.metering.classify import LOST
from ftpipe.metering.ledger import UsageRecord
from ftpipe.notify.webhooks import notify_tenant
from resources import CatalogResource, PlatformResource
from sensors.run_tags import ATTEMPT_TAG, JOB_TAG, POOL_TAG, TENANT_TAG, next_attempt

MAX_ATTEMPTS = 3
TRAINING_STEP = "adapter"
GATE_FAILURES = ("check quality_gates failed", "check serving_compatible failed")


def _notify_failed(context: RunFailureSensorContext, platform: PlatformResource, run: DagsterRun, error_class: str,
                   reason: str) -> None:
    """The tenant hears of a failure once, when it is final: not of a platform failure that will be resumed."""
    tenant, job = run.tags.get(TENANT_TAG), run.tags.get(JOB_TAG)
    if tenant:
        notify_tenant(platform.config(), tenant, "job.failed", f"{run.run_id}:job.failed",
                      {"job": job, "run_id": run.run_id, "error_class": error_class, "reason": reason},
                      log=context.log.info)


def failure_reason(instance: DagsterInstance, run: DagsterRun) -> tuple[str, str]:
    """(error class, reason) of a failed run: ``user`` for bad input or a failed quality gate."""
    for record in instance.all_logs(run.run_id, of_type={DagsterEventType.ASSET_CHECK_EVALUATION,
                                                           DagsterEventType.STEP_FAILURE}):
        event = record.dagster_event
        if event.event_type == DagsterEventType.ASSET_CHECK_EVALUATION:
            evaluation = event.event_specific_data
            # Only a failed ERROR check stops a run; WARN checks (data-quality warnings) never do.
            if not evaluation.passed and evaluation.severity == AssetCheckSeverity.ERROR:
                return USER_ERROR, f"check {evaluation.check_name} failed: {evaluation.description or ''}".strip()
        else:
            data = event.step_failure_data
            user = data.user_failure_data
            if user is not None:
                meta = user.metadata or {}
                cls = getattr(meta.get(ERROR_CLASS_KEY), "value", PLATFORM_ERROR)
                return cls, user.description or "failed"
            message = data.error.message.strip() if data.error else "failed"
            return PLATFORM_ERROR, message.splitlines()[0][:300]
    return PLATFORM_ERROR, "run failed before any step ran"


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


@run_failure_sensor(monitored_jobs=[finetune_job], request_job=finetune_job, minimum_interval_seconds=10)
def resume_failed_runs(context: RunFailureSensorContext, platform: PlatformResource, catalog: CatalogResource):
    run = context.dagster_run
    lost = meter_lost_attempt(context.instance, run, platform, catalog)
    if lost:
        context.log.info(f"metered a lost attempt of {run.run_id}: {lost.gpu_seconds:.1f} GPU-seconds, refunded")
    error_class, reason = failure_reason(context.instance, run)
    attempt = int(run.tags.get(ATTEMPT_TAG, "1"))
    if error_class == USER_ERROR:
        if not reason.startswith(GATE_FAILURES):  # registered_adapter already sent job.gate_failed
            _notify_failed(context, platform, run, error_class, reason)
        return SkipReason(f"run {run.run_id} failed on the tenant's input, not retried: {reason}")
    if attempt >= MAX_ATTEMPTS:
        _notify_failed(context, platform, run, error_class, reason)
        return SkipReason(f"run {run.run_id} failed {attempt} times; giving up: {reason}")
    return next_attempt(run, run_key=f"{run.run_id}:resume")
