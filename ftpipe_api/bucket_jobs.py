"""Jobs a tenant submitted through the bucket (``ftpipe submit``, any S3 client), read and listed through the
API beside the ones it created there.

Such a job is its folder and its runs; the API keeps a row per job (``job_requests``) for its listing order
and what was asked. The row of a bucket job is added the first time the API sees the folder: its id is the
folder's name, its model and file names the manifest's (a bucket upload has no file ids), its creation time
that of its first run, or the moment the API first saw it when it has none (a refused manifest).
"""

from __future__ import annotations

from datetime import datetime, timezone

from ftpipe.catalog.job_requests import JobRequest
from ftpipe.landing import manifest_key, match_manifest_key
from ftpipe.manifest import MAX_MANIFEST_BYTES, JobManifest, parse_manifest
from ftpipe.objectstore import FILE, ObjectInfo
from partitions.keys import InvalidName, validate_name
from sensors.job_state import job_runs

SOURCE = "bucket"


def bucket_job(api, tenant: str, job: str) -> JobRequest | None:
    """The tenant's job folder ``job`` as an API job, registered on first sight; None if it holds no manifest."""
    try:
        key = manifest_key(tenant, validate_name("job", job))
    except InvalidName:
        return None  # not a name any folder the platform admits can have
    try:
        info = api.store.stat(key)
    except (OSError, ValueError):  # a link or a folder in the manifest's place: a job, refused by the sensor
        info = ObjectInfo(key, 0, "", kind="special")
    if info is None:
        return None
    _register(api, tenant, job, info)
    return api.jobs.get(tenant, job)


def register_bucket_jobs(api, tenant: str) -> None:
    """Give every job folder of the tenant that the API has no row for one, so that listings page over both."""
    known = api.jobs.ids(tenant)
    for info in api.store.list(f"tenants/{tenant}/jobs/"):
        found = match_manifest_key(info.key)
        if found is None or found[0] != tenant or found[1] in known:
            continue
        try:
            validate_name("job", found[1])
        except InvalidName:
            continue  # refused by the upload sensor by name; it has no job to show
        _register(api, tenant, found[1], info)
        known.add(found[1])


def _register(api, tenant: str, job: str, info: ObjectInfo) -> None:
    manifest = _manifest(api.store, info)
    runs = job_runs(api.instance, tenant, job)
    created = runs[0].create_timestamp.astimezone(timezone.utc) if runs else datetime.now(timezone.utc)
    api.jobs.add_if_absent(JobRequest(
        job, tenant, created, manifest.base_model if manifest else "",
        manifest.dataset if manifest else "", manifest.eval_dataset if manifest else None,
        {"objective": manifest.objective if manifest else "sft", "ftpipe": {"source": SOURCE}}, content_key=""))


def _manifest(store, info: ObjectInfo) -> JobManifest | None:
    """The manifest as the upload sensor reads it, or None for one it refuses (the job's state says why)."""
    if info.kind != FILE:
        return None
    try:
        return parse_manifest(store.read_bytes(info.key, max_bytes=MAX_MANIFEST_BYTES), info.key)
    except Exception:  # noqa: BLE001 - whatever a stranger wrote, its job is still listed, as refused
        return None
