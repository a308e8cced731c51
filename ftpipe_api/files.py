"""``/v1/files``: a tenant's training files, validated as they arrive.

An upload runs the same structural checks as ``ftpipe validate`` and the pipeline's validated-dataset asset
(every record's shape and fields, file by file); a file that fails is refused with the first problems by file,
line and field and the whole report, and nothing is stored. The pre-flight through a base model's template
waits for the job, which names the model.
"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

from fastapi import APIRouter, Depends, File, Form, Request, UploadFile
from fastapi.responses import Response

from ftpipe.catalog.files import TenantFile
from ftpipe.data.pipeline import inferred_objective, validate_to_parquet
from ftpipe.data.read import UnsupportedFormat
from ftpipe.data.report import report_dict
from ftpipe.landing import api_file_key
from ftpipe.manifest import check_data_file_name
from ftpipe_api.auth import tenant_of
from ftpipe_api.errors import ApiError, not_found

router = APIRouter(prefix="/v1/files", tags=["files"])
PURPOSE = "fine-tune"
_CHUNK = 1 << 20
MAX_LISTED_PROBLEMS = 5


def file_object(f: TenantFile) -> dict:
    return {"id": f.file_id, "object": "file", "bytes": f.bytes, "created_at": int(f.created_at.timestamp()),
            "filename": f.filename, "purpose": f.purpose, "status": "processed", "status_details": None,
            "expires_at": None, "ftpipe": {"objective": f.objective, "sha256": f.sha256}}


def _file_name(upload: UploadFile) -> str:
    name = Path(upload.filename or "").name  # a browser may send a whole path; the folder is not the tenant's
    try:
        return check_data_file_name(name)
    except (ValueError, UnicodeError) as exc:
        raise ApiError(400, f"file name: {exc}", param="file", code="invalid_file_name") from None


def _spool(upload: UploadFile, dest: Path, limit: int) -> tuple[int, str]:
    """Copy the upload to ``dest`` with its size and SHA-256, refusing it as soon as it passes ``limit``."""
    digest, size = hashlib.sha256(), 0
    with dest.open("wb") as out:
        while chunk := upload.file.read(_CHUNK):
            size += len(chunk)
            if size > limit:
                raise ApiError(413, f"{dest.name}: larger than the API's upload limit of {limit:,} bytes; upload "
                                    "larger datasets to the landing zone directly (ftpipe submit)",
                               param="file", code="file_too_large")
            digest.update(chunk)
            out.write(chunk)
    if size == 0:
        raise ApiError(400, f"{dest.name}: the file is empty", param="file", code="invalid_file")
    return size, digest.hexdigest()


def _validate(path: Path) -> str:
    """The file's objective (``sft`` or ``dpo``, from its first record's shape), or the refusal."""
    try:
        objective, _shape = inferred_objective(path)
        check = validate_to_parquet({"train": path}, 0.1, path.with_name(".examples.parquet"), min_examples=1,
                                    max_examples=None, objective=objective)
    except UnsupportedFormat as exc:
        raise ApiError(400, str(exc), param="file", code="unsupported_file_type") from None
    if check.outcome.passed:
        return objective
    report = report_dict(check)
    problems = [f"{e['source_file']} line {e['line']}, field '{e['field']}': {e['message']}"
                for e in report["errors"][:MAX_LISTED_PROBLEMS]] + report["dataset_errors"][:MAX_LISTED_PROBLEMS]
    n = report["n_row_errors"] + len(report["dataset_errors"])
    raise ApiError(400, f"{path.name} failed validation with {n:,} error(s): " + "; ".join(problems),
                   param="file", code="invalid_file", report=report)


@router.post("")
def upload_file(request: Request, file: UploadFile = File(...), purpose: str = Form(...),
                tenant: str = Depends(tenant_of)) -> dict:
    api = request.app.state.api
    if purpose != PURPOSE:
        raise ApiError(400, f"purpose '{purpose[:40]}' is not supported here; use '{PURPOSE}'", param="purpose",
                       code="invalid_purpose")
    name = _file_name(file)
    with tempfile.TemporaryDirectory(prefix="ftpipe-upload-") as tmp:
        path = Path(tmp) / name
        size, sha256 = _spool(file, path, api.max_file_bytes)
        objective = _validate(path)
        file_id = api.files.new_file_id()
        api.store.write_bytes(api_file_key(tenant, file_id, name), path.read_bytes())
    return file_object(api.files.add(file_id, tenant, name, purpose, size, sha256, objective))


@router.get("")
def list_files(request: Request, tenant: str = Depends(tenant_of)) -> dict:
    return {"object": "list", "data": [file_object(f) for f in request.app.state.api.files.list(tenant)],
            "has_more": False}


def own_file(api, tenant: str, file_id: str, param: str | None = None) -> TenantFile:
    found = api.files.get(tenant, file_id)
    if found is None:
        raise not_found("file", file_id, param)
    return found


@router.get("/{file_id}")
def get_file(file_id: str, request: Request, tenant: str = Depends(tenant_of)) -> dict:
    return file_object(own_file(request.app.state.api, tenant, file_id))


@router.get("/{file_id}/content")
def file_content(file_id: str, request: Request, tenant: str = Depends(tenant_of)) -> Response:
    api = request.app.state.api
    f = own_file(api, tenant, file_id)
    try:
        data = api.store.read_bytes(api_file_key(tenant, f.file_id, f.filename), max_bytes=api.max_file_bytes)
    except (OSError, ValueError) as exc:  # removed or replaced through the bucket, which is the tenant's too
        raise ApiError(409, f"file {f.file_id} cannot be read from the landing zone: {exc}",
                       code="file_unreadable") from None
    return Response(data, media_type="application/octet-stream")


@router.delete("/{file_id}")
def delete_file(file_id: str, request: Request, tenant: str = Depends(tenant_of)) -> dict:
    api = request.app.state.api
    f = own_file(api, tenant, file_id)
    api.files.mark_deleted(tenant, f.file_id)
    try:
        api.store.delete(api_file_key(tenant, f.file_id, f.filename))
    except (OSError, ValueError):
        pass  # already gone from the bucket, or something the tenant put in its place: the file is gone for us
    return {"id": f.file_id, "object": "file", "deleted": True}
