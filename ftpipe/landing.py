"""The landing-zone layout: where tenants upload jobs and where the platform writes their results.

    tenants/{tenant}/jobs/{job}/manifest.yaml     the submission (written last)
    tenants/{tenant}/jobs/{job}/<dataset files>   the data the manifest names
    tenants/{tenant}/results/{job}/...            reports the platform writes back for the tenant
    tenants/{tenant}/results/_rejected/{name}.md  why a job folder whose name is not a valid job name was refused
    tenants/{tenant}/billing/{YYYY-MM}.md         the tenant's monthly GPU usage statement
    tenants/{tenant}/files/{file id}/{name}       a file uploaded through the API, before a job copies it

Uploads and results live under separate prefixes so that the platform never writes into what a tenant
uploaded, and every key is built from validated names so none can leave the tenant's prefix. A job folder
named against the rules (``Support V1``) has no results folder of its own: its refusal goes to ``_rejected/``,
which no valid job name can be (``_`` is not allowed in one), under a file name made of the folder's name
reduced to a-z, 0-9 and '-' plus a hash of the whole name, so two such folders never share a report.
"""

from __future__ import annotations

import hashlib
import re

from ftpipe.manifest import MANIFEST_NAME
from partitions.keys import validate_name

TENANTS_PREFIX = "tenants/"
_MANIFEST_KEY = re.compile(r"tenants/([^/]+)/jobs/([^/]+)/" + re.escape(MANIFEST_NAME))
_JOB_KEY = re.compile(r"tenants/([^/]+)/jobs/([^/]+)")


def job_prefix(tenant: str, job: str) -> str:
    return f"tenants/{validate_name('tenant', tenant)}/jobs/{validate_name('job', job)}/"


def job_file_key(tenant: str, job: str, file_name: str) -> str:
    if "/" in file_name or file_name.startswith("."):
        raise ValueError(f"invalid file name {file_name!r}")
    return job_prefix(tenant, job) + file_name


def manifest_key(tenant: str, job: str) -> str:
    return job_file_key(tenant, job, MANIFEST_NAME)


def api_file_key(tenant: str, file_id: str, file_name: str) -> str:
    if "/" in file_name or file_name.startswith("."):
        raise ValueError(f"invalid file name {file_name!r}")
    return f"tenants/{validate_name('tenant', tenant)}/files/{validate_name('file id', file_id)}/{file_name}"


def results_key(tenant: str, job: str, name: str) -> str:
    return f"tenants/{validate_name('tenant', tenant)}/results/{validate_name('job', job)}/{name}"


def rejected_name_key(tenant: str, job_folder: str) -> str:
    """Where the refusal of ``tenants/{tenant}/jobs/{job_folder}/`` goes when ``job_folder`` is not a valid job
    name (the tenant's name must be valid: a key is never built from an invalid one)."""
    slug = re.sub(r"[^a-z0-9]+", "-", job_folder.lower())[:40].strip("-")
    digest = hashlib.sha256(job_folder.encode("utf-8", "surrogateescape")).hexdigest()[:12]
    return f"tenants/{validate_name('tenant', tenant)}/results/_rejected/{slug + '-' if slug else ''}{digest}.md"


def statement_key(tenant: str, month: str) -> str:
    if not re.fullmatch(r"\d{4}-\d{2}", month):
        raise ValueError(f"invalid billing month {month!r} (expected YYYY-MM)")
    return f"tenants/{validate_name('tenant', tenant)}/billing/{month}.md"


def match_manifest_key(key: str) -> tuple[str, str] | None:
    """(tenant, job) as written in the key, *unvalidated*, if the key is a job manifest."""
    m = _MANIFEST_KEY.fullmatch(key)
    return (m.group(1), m.group(2)) if m else None


def match_job_key(key: str) -> tuple[str, str] | None:
    """(tenant, job), *unvalidated*, if the key is a job folder itself: listed only when it is not a real
    folder (a link to another folder, say), which is a submission the platform must refuse."""
    m = _JOB_KEY.fullmatch(key)
    return (m.group(1), m.group(2)) if m else None
