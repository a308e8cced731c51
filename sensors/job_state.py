"""A job's state as OpenAI's fine-tuning API shows it, read from where the platform keeps it: the job's Dagster
runs (the newest decides: a prepare run, then the finetune run it led to), the adapter registry and the
refusal the upload sensor wrote. The API answers with it and ``status_files`` writes it into the tenant's
results as ``status.json``.

    no run, no refusal            validating_files   the upload sensor has not admitted the manifest yet
    no run, refused               failed             the refusal's text is the error
    prepare: not finished         validating_files   validation, tokenization and the pre-flight (CPU)
    prepare: SUCCESS              queued             the finetune run is about to be queued; cancelled if
                                                     the tenant cancelled it in between
    QUEUED / NOT_STARTED          queued
    STARTING / STARTED            running
    CANCELING / CANCELED          cancelled          queued again when the platform preempted it: it resumes
    SUCCESS                       succeeded          fine_tuned_model: the promoted adapter's id
    FAILURE                       failed             the reason ``ftpipe status`` and the reports give; queued
                                                     when the failure sensor will resume it (a platform
                                                     failure with attempts left), as a preempted run is

A status is final only when nothing the platform does on its own changes it (``finished_at`` is set then), so
a client that polls until a final status never stops at a failure that the next attempt carries on from.
"""

from __future__ import annotations

from dataclasses import dataclass

from dagster import DagsterInstance, DagsterRunStatus, RunRecord, RunsFilter

from ftpipe.catalog.adapters import AdapterRegistry
from ftpipe.landing import results_key
from ftpipe.objectstore import ObjectStore
from partitions.run_tags import ATTEMPT_TAG, CANCEL_REQUESTED_TAG, JOB_TAG, PREEMPTED_TAG, PREPARE_JOB, TENANT_TAG
from sensors.failures import failure_reason, will_resume

REJECTED = "rejected.md"
STATUS_FILE = "status.json"
_STATUS = {
    DagsterRunStatus.QUEUED: "queued", DagsterRunStatus.NOT_STARTED: "queued",
    DagsterRunStatus.STARTING: "running", DagsterRunStatus.STARTED: "running",
    DagsterRunStatus.CANCELING: "cancelled", DagsterRunStatus.CANCELED: "cancelled",
    DagsterRunStatus.SUCCESS: "succeeded", DagsterRunStatus.FAILURE: "failed",
}
ACTIVE = {DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING, DagsterRunStatus.STARTED}


@dataclass
class JobState:
    status: str
    run: RunRecord | None
    finished_at: int | None = None
    fine_tuned_model: str | None = None
    error: dict | None = None

    def document(self, tenant: str, job: str) -> dict:
        """The state's part of OpenAI's job object, as ``status.json`` holds it and the API's answers start."""
        run = self.run.dagster_run if self.run else None
        return {"object": "fine_tuning.job", "id": job, "organization_id": tenant, "status": self.status,
                "fine_tuned_model": self.fine_tuned_model, "error": self.error, "finished_at": self.finished_at,
                "ftpipe": {"run_id": run.run_id if run else None, "stage": run.job_name if run else None,
                           "attempt": int(run.tags.get(ATTEMPT_TAG, "1")) if run else None}}


def job_runs(instance: DagsterInstance, tenant: str, job: str) -> list[RunRecord]:
    """The job's runs of both stages, oldest first: each attempt, its retries, requeues after preemption."""
    records = instance.get_run_records(RunsFilter(tags={TENANT_TAG: tenant, JOB_TAG: job}))
    return sorted(records, key=lambda r: (r.create_timestamp, r.storage_id))  # a stage's runs within a tick


def _refusal(store: ObjectStore, tenant: str, job: str) -> str | None:
    try:
        text = store.read_bytes(results_key(tenant, job, REJECTED), max_bytes=1 << 20).decode("utf-8", "replace")
    except (OSError, ValueError):  # none, or something the tenant put in its place
        return None
    return text.removeprefix("# Job rejected").strip()


def rejected(reason: str) -> JobState:
    return JobState("failed", None, error={"code": "job_rejected", "message": reason, "param": None})


def job_state(instance: DagsterInstance, store: ObjectStore, adapters: AdapterRegistry, tenant: str,
              job: str) -> JobState:
    runs = job_runs(instance, tenant, job)
    if not runs:
        refusal = _refusal(store, tenant, job)
        return JobState("validating_files", None) if refusal is None else rejected(refusal)
    record = runs[-1]
    run = record.dagster_run
    status = _STATUS.get(run.status, "running")
    error = None
    if run.job_name == PREPARE_JOB and run.status in ACTIVE:
        status = "validating_files"
    elif run.job_name == PREPARE_JOB and status == "succeeded":
        status = "cancelled" if run.tags.get(CANCEL_REQUESTED_TAG) else "queued"
    elif status == "cancelled" and PREEMPTED_TAG in run.tags:
        status = "queued"  # the platform stopped it for a premium run; it resumes from its checkpoint
    elif status == "failed":
        error_class, reason = failure_reason(instance, run)
        if will_resume(run, error_class):
            status = "queued"  # lost to the platform, not the tenant: the next attempt resumes from its checkpoint
        else:
            error = {"code": f"{error_class}_error", "message": reason, "param": None}
    end_time = record.end_time if status in ("succeeded", "failed", "cancelled") else None  # final states only
    state = JobState(status, record, finished_at=int(end_time) if end_time else None, error=error)
    if status == "succeeded":
        adapter = adapters.for_run(run.run_id)
        if adapter is not None and adapter.status == "promoted":
            state.fine_tuned_model = adapter.adapter_id
    return state
