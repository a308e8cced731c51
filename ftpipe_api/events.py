"""``GET /v1/fine_tuning/jobs/{id}/events``: the job's story, read from its runs' Dagster event logs.

Each run's queueing, start and end (the first stage's as file validation), every asset step (validation,
tokenization, training, evaluation, registration), every quality check with its verdict, and each training step's
metrics (OpenAI's ``metrics`` events: ``train_loss``, ``valid_loss``, ``learning_rate``...). Newest first, as OpenAI
lists them.
"""

from __future__ import annotations

from dagster import DagsterEventType, DagsterInstance, EventLogEntry

from ftpipe.training.progress_line import parse_progress
from partitions.run_tags import ATTEMPT_TAG, PREPARE_JOB
from sensors.failures import failure_reason
from sensors.job_state import job_runs

_RUN_EVENTS = {
    DagsterEventType.RUN_ENQUEUED: ("info", "Job queued (attempt {attempt})"),
    DagsterEventType.RUN_START: ("info", "Job started (attempt {attempt})"),
    DagsterEventType.RUN_SUCCESS: ("info", "The job has successfully completed"),
    DagsterEventType.RUN_CANCELED: ("warn", "Job cancelled"),
}
_PREPARE_EVENTS = {  # the first stage's run: validation, tokenization and the pre-flight, before any GPU
    **_RUN_EVENTS,
    DagsterEventType.RUN_ENQUEUED: ("info", "Files queued for validation (attempt {attempt})"),
    DagsterEventType.RUN_START: ("info", "Validating files (attempt {attempt})"),
    DagsterEventType.RUN_SUCCESS: ("info", "Files validated and tokenized; queued for training"),
}


def _event(run_id: str, entry: EventLogEntry, storage_id: int, level: str, message: str,
           data: dict | None = None) -> dict:
    return {"object": "fine_tuning.job.event", "id": f"ftevent-{run_id[:8]}-{storage_id}",
            "created_at": int(entry.timestamp), "level": level, "message": message,
            "type": "metrics" if data else "message", "data": data}


def _from_entry(instance: DagsterInstance, run, storage_id: int, entry: EventLogEntry) -> dict | None:
    event = entry.dagster_event
    attempt = run.tags.get(ATTEMPT_TAG, "1")
    if event is None:
        metrics = parse_progress(entry.user_message or "")
        if metrics:
            return _event(run.run_id, entry, storage_id, "info", f"Step {metrics['step']}/{metrics['total_steps']}: "
                          + ", ".join(f"{k}={v:.4g}" for k, v in metrics.items()
                                      if k in ("train_loss", "valid_loss") and v is not None), metrics)
        return None
    kind = event.event_type
    run_events = _PREPARE_EVENTS if run.job_name == PREPARE_JOB else _RUN_EVENTS
    if kind in run_events:
        level, text = run_events[kind]
        return _event(run.run_id, entry, storage_id, level, text.format(attempt=attempt))
    if kind == DagsterEventType.RUN_FAILURE:
        error_class, reason = failure_reason(instance, run)
        return _event(run.run_id, entry, storage_id, "error", f"Job failed ({error_class} error): {reason}")
    if kind == DagsterEventType.STEP_START:
        return _event(run.run_id, entry, storage_id, "info", f"Started {event.step_key}")
    if kind == DagsterEventType.ASSET_MATERIALIZATION:
        asset_key = event.step_materialization_data.materialization.asset_key  # event.asset_key, typed non-None
        return _event(run.run_id, entry, storage_id, "info", f"{asset_key.to_user_string()} ready")
    if kind == DagsterEventType.ASSET_CHECK_EVALUATION:
        check = event.asset_check_evaluation_data
        verdict = "passed" if check.passed else "failed"
        detail = f": {check.description}" if check.description and not check.passed else ""
        return _event(run.run_id, entry, storage_id, "info" if check.passed else "error",
                      f"Check {check.check_name} {verdict}{detail}")
    return None


def job_events(instance: DagsterInstance, tenant: str, job: str) -> list[dict]:
    """Every event of every attempt, newest first."""
    events = []
    for record in job_runs(instance, tenant, job):
        run = record.dagster_run
        for log in instance.get_records_for_run(run.run_id, limit=100_000).records:
            event = _from_entry(instance, run, log.storage_id, log.event_log_entry)
            if event is not None:
                events.append(event)
    return events[::-1]


def page(events: list[dict], after: str | None, limit: int) -> dict:
    start = next((i + 1 for i, e in enumerate(events) if e["id"] == after), 0) if after else 0
    chunk = events[start:start + limit]
    return {"object": "list", "data": chunk, "has_more": start + limit < len(events)}
