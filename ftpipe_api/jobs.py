"""``/v1/fine_tuning/jobs``: create, list, read and cancel a tenant's fine-tuning jobs, those created here and
those uploaded straight to the bucket (``ftpipe_api.bucket_jobs``).

Creating a job writes what ``ftpipe submit`` writes, the data files and then the manifest, into the job's
folder in the landing zone; the upload sensor admits it from there like any other. A request the platform
would refuse (an unregistered model, a bad hyperparameter, an SFT file for DPO) is refused here first, with
the same message. A request whose data, settings and base model equal a job of the same tenant that
succeeded is answered with that job, which trained already, unless it asks for ``ftpipe.new_run``.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml
from dagster import DagsterRunStatus
from fastapi import APIRouter, Depends, Query, Request

from ft_assets.partition import publish
from ftpipe.admission import admit
from ftpipe.catalog.job_requests import JobRequest
from ftpipe.landing import api_file_key, manifest_key, results_key
from ftpipe.submission import submit_job
from ftpipe.training.autoconfig import learning_rate
from ftpipe_api.auth import tenant_of
from ftpipe_api.bucket_jobs import bucket_job, register_bucket_jobs
from ftpipe_api.checkpoints import job_checkpoints
from ftpipe_api.errors import ApiError, not_found
from ftpipe_api.events import job_events, page
from ftpipe_api.files import own_file
from ftpipe_api.idempotency import idempotent
from ftpipe_api.requests import CreateJob, manifest_fields
from partitions.run_tags import CANCEL_REQUESTED_TAG, PREPARE_JOB
from sensors.job_state import ACTIVE, STATUS_FILE, JobState, job_runs, job_state

router = APIRouter(prefix="/v1/fine_tuning/jobs", tags=["fine-tuning jobs"])
MANIFEST_SOURCE = ("the job as a manifest (there n_epochs is 'epochs', batch_size 'micro_batch_size', "
                   "learning_rate_multiplier times the automatic rate 'learning_rate', beta 'dpo_beta', "
                   "ftpipe.adapter 'method')")


def job_object(api, job: JobRequest, state: dict | None = None) -> dict:
    """OpenAI's job object: the request as the tenant made it, then the state (``status.json``'s document)."""
    state = state or job_state(api.instance, api.store, api.adapters, job.tenant, job.job_id).document(
        job.tenant, job.job_id)
    body = job.request
    return {
        "object": "fine_tuning.job", "id": job.job_id, "model": job.model,
        "created_at": int(job.created_at.timestamp()), "result_files": [], "training_file": job.training_file,
        "validation_file": job.validation_file, "hyperparameters": body.get("hyperparameters") or {},
        "trained_tokens": None, "seed": body.get("seed"), "estimated_finish": None, "integrations": [],
        "metadata": body.get("metadata"), "suffix": body.get("suffix"),
        "method": body.get("method") or {"type": "dpo" if body.get("objective") == "dpo" else "supervised"},
        **state, "ftpipe": {**state["ftpipe"], "manifest": manifest_key(job.tenant, job.job_id),
                            "source": (body.get("ftpipe") or {}).get("source", "api")},
    }


def _stored_bytes(api, tenant: str, record, param: str) -> bytes:
    """The file's bytes as validated: the bucket is the tenant's too, and what is there now may differ."""
    try:
        data = api.store.read_bytes(api_file_key(tenant, record.file_id, record.filename), max_bytes=api.max_file_bytes)
    except FileNotFoundError:
        raise ApiError(409, f"file {record.file_id} ({record.filename}) is no longer in the landing zone; upload it "
                            "again", param=param, code="file_missing") from None
    except (OSError, ValueError) as exc:  # a link or a folder in its place, or a larger object
        raise ApiError(409, f"file {record.file_id} cannot be read: {exc}", param=param,
                       code="file_unreadable") from None
    if hashlib.sha256(data).hexdigest() != record.sha256:
        raise ApiError(409, f"file {record.file_id} ({record.filename}) changed in the landing zone after it was "
                            "validated; upload it again", param=param, code="file_changed")
    return data


def _data_files(api, tenant: str, body: CreateJob) -> tuple[dict, dict[str, bytes], list]:
    """The manifest's file fields, the bytes to upload under those names, and the files' records."""
    train = own_file(api, tenant, body.training_file, "training_file")
    fields, files, records = {"dataset": train.filename}, {train.filename: _stored_bytes(api, tenant, train,
                                                                                         "training_file")}, [train]
    if body.validation_file:
        if body.validation_file == body.training_file:
            raise ApiError(400, "validation_file is the training file: a score on the data the adapter trained on "
                                "says nothing; give another file, or none for a held-out split",
                           param="validation_file", code="validation_is_training")
        valid = own_file(api, tenant, body.validation_file, "validation_file")
        # Two uploads may share a name; the validation copy is then named by its id, which no upload can be.
        name = valid.filename if valid.filename != train.filename else f"{valid.file_id}{Path(valid.filename).suffix}"
        fields["eval_dataset"] = name
        files[name] = _stored_bytes(api, tenant, valid, "validation_file")
        records.append(valid)
    return fields, files, records


def _content_key(manifest: dict, records: list, base_digest: str) -> str:
    """What decides the adapter: the data's bytes, the manifest less its file names, the base model's weights."""
    settings = {k: v for k, v in manifest.items() if k not in ("dataset", "eval_dataset")}
    return hashlib.sha256(json.dumps({"data": [r.sha256 for r in records], "settings": settings,
                                      "base": base_digest}, sort_keys=True).encode()).hexdigest()


def _create(api, tenant: str, body: CreateJob) -> dict:
    if body.model not in api.base_models.models:
        raise ApiError(400, f"model '{body.model[:100]}' is not a base model this platform registered; registered: "
                            f"{', '.join(sorted(api.base_models.models))}", param="model", code="model_not_found")
    file_fields, files, records = _data_files(api, tenant, body)
    try:
        resolved = api.base_models.resolve(body.model)
    except (LookupError, OSError, ValueError) as exc:
        raise ApiError(503, f"model '{body.model}' is registered but cannot be read on this platform now: "
                            f"{str(exc)[:300]}", param="model", code="model_unavailable") from None
    try:
        fields = manifest_fields(body, records[0].objective or "sft",
                                 learning_rate(resolved.num_parameters, body.ftpipe.adapter).value)
    except ValueError as exc:
        raise ApiError(400, str(exc), param="ftpipe.hyperparameters", code="invalid_hyperparameters") from None
    manifest = {**fields, **file_fields}
    manifest_bytes = yaml.safe_dump(manifest, sort_keys=False).encode()
    admission = admit(manifest_bytes, MANIFEST_SOURCE, api.platform, api.base_models)
    if admission.refusal:
        raise ApiError(400, admission.refusal, code="job_refused")
    if manifest["objective"] == "sft" and records[0].objective == "dpo":
        raise ApiError(400, f"{records[0].filename} holds preference pairs: set method.type 'dpo' to train on it",
                       param="method", code="objective_mismatch")
    content_key = _content_key(manifest, records, resolved.digest)
    if not body.ftpipe.new_run:
        for earlier in api.jobs.with_content_key(tenant, content_key):
            state = job_state(api.instance, api.store, api.adapters, tenant, earlier.job_id)
            if state.status == "succeeded":
                return job_object(api, earlier, state.document(tenant, earlier.job_id))
    job = JobRequest(api.jobs.new_job_id(), tenant, datetime.now(timezone.utc), body.model, body.training_file,
                     body.validation_file, {**body.model_dump(exclude_none=True), "objective": manifest["objective"]},
                     content_key)
    try:
        submit_job(api.store, tenant, job.job_id, files, manifest_bytes)
    except (OSError, ValueError) as exc:  # the tenant's own prefix holds something unwritable (a link, a file)
        raise ApiError(409, f"the job could not be written into your landing zone: {exc}",
                       code="landing_zone_unwritable") from None
    api.jobs.add(job)
    document = JobState("validating_files", None).document(tenant, job.job_id)  # no run can exist yet
    try:  # until its first run nothing else says so in the bucket
        publish(api.store, tenant, job.job_id, STATUS_FILE, json.dumps(document, indent=2))
    except (OSError, ValueError):
        pass  # a tenant that broke its own results area reads the state from the API only
    return job_object(api, job, document)


@router.post("")
def create_job(body: CreateJob, request: Request, tenant: str = Depends(tenant_of)) -> dict:
    api = request.app.state.api
    return idempotent(request, api, tenant, body.model_dump(mode="json"), lambda: _create(api, tenant, body))


def _own_job(request: Request, tenant: str, job_id: str) -> JobRequest:
    api = request.app.state.api
    found = api.jobs.get(tenant, job_id) or bucket_job(api, tenant, job_id)
    if found is None:
        raise not_found("fine-tuning job", job_id)
    return found


@router.get("")
def list_jobs(request: Request, after: str | None = None, limit: int = Query(20, ge=1, le=100),
              tenant: str = Depends(tenant_of)) -> dict:
    api = request.app.state.api
    register_bucket_jobs(api, tenant)
    page, has_more = api.jobs.page(tenant, after, limit)
    return {"object": "list", "data": [job_object(api, job) for job in page], "has_more": has_more}


@router.get("/{job_id}")
def get_job(job_id: str, request: Request, tenant: str = Depends(tenant_of)) -> dict:
    return job_object(request.app.state.api, _own_job(request, tenant, job_id))


@router.post("/{job_id}/cancel")
def cancel_job(job_id: str, request: Request, tenant: str = Depends(tenant_of)) -> dict:
    """Dagster's own termination, as the UI's Terminate: a queued run leaves the queue; a running trainer gets
    SIGTERM, writes a checkpoint at its next step and exits, and the run ends CANCELED."""
    api = request.app.state.api
    job = _own_job(request, tenant, job_id)
    runs = job_runs(api.instance, tenant, job.job_id)
    if not runs:
        raise ApiError(409, "the job has not been queued yet (its files are being admitted); retry in a few seconds",
                       code="job_not_queued")
    run = runs[-1].dagster_run
    if run.job_name == PREPARE_JOB and run.status == DagsterRunStatus.SUCCESS and CANCEL_REQUESTED_TAG not in run.tags:
        # Between the stages: the sensor that queues the GPU run reads this tag and queues nothing.
        api.instance.add_run_tags(run.run_id, {CANCEL_REQUESTED_TAG: "true"})
        return job_object(api, job)
    if run.status not in ACTIVE:
        raise ApiError(400, f"the job is {job_state(api.instance, api.store, api.adapters, tenant, job.job_id).status}"
                            "; only a queued or running job can be cancelled", code="job_not_cancellable")
    api.instance.run_coordinator.cancel_run(run.run_id)
    return job_object(api, job)


@router.get("/{job_id}/events")
def list_events(job_id: str, request: Request, after: str | None = None, limit: int = Query(20, ge=1, le=1000),
                tenant: str = Depends(tenant_of)) -> dict:
    api = request.app.state.api
    job = _own_job(request, tenant, job_id)
    created: dict[str, Any] = {"object": "fine_tuning.job.event", "id": f"ftevent-{job.job_id[6:14]}-created",
               "created_at": int(job.created_at.timestamp()), "level": "info", "type": "message", "data": None,
               "message": f"Created fine-tuning job: {job.job_id}"}
    events = job_events(api.instance, tenant, job.job_id)
    state = job_state(api.instance, api.store, api.adapters, tenant, job.job_id)
    if state.run is None and state.error:
        events.insert(0, {**created, "id": f"{created['id'][:-8]}-rejected", "level": "error",
                          "message": f"Job rejected: {state.error['message']}"})
    return page(events + [created], after, limit)


@router.get("/{job_id}/checkpoints")
def list_checkpoints(job_id: str, request: Request, after: str | None = None,
                     limit: int = Query(10, ge=1, le=100), tenant: str = Depends(tenant_of)) -> dict:
    api = request.app.state.api
    job = _own_job(request, tenant, job_id)
    listed = page(job_checkpoints(api.artifacts_root, tenant, job.job_id), after, limit)
    return {**listed, "first_id": listed["data"][0]["id"] if listed["data"] else None,
            "last_id": listed["data"][-1]["id"] if listed["data"] else None}


REPORT_FILES = {"validation": "validation.json", "eval_report": "eval_report.json", "quality_gates": "quality_gates.md",
                "training_failed": "training_failed.md"}
MAX_REPORT_BYTES = 16 << 20


@router.get("/{job_id}/report")
def job_report(job_id: str, request: Request, tenant: str = Depends(tenant_of)) -> dict:
    """The platform's reports on the job, as written into the tenant's results: the validation report, the
    evaluation (base vs tuned with intervals and every per-example score) and the quality gates' verdicts."""
    api = request.app.state.api
    job = _own_job(request, tenant, job_id)
    report: dict = {"object": "ftpipe.job_report", "id": job.job_id}
    for name, file in REPORT_FILES.items():
        try:
            data = api.store.read_bytes(results_key(tenant, job.job_id, file), max_bytes=MAX_REPORT_BYTES)
        except (OSError, ValueError):
            report[name] = None
            continue
        report[name] = json.loads(data) if file.endswith(".json") else data.decode("utf-8", "replace")
    return report
