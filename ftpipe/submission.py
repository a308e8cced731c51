"""A job into the landing zone the way tenants upload it: data first, manifest last (the CLI, the API, the demo)."""

from __future__ import annotations

from pathlib import Path

import yaml

from ftpipe.landing import job_file_key, manifest_key
from ftpipe.manifest import parse_manifest
from ftpipe.objectstore import ObjectStore
from partitions.keys import validate_name

DEFAULT_BASE_MODEL = "ftpipe/tiny-llama"


def default_manifest(data_name: str, base_model: str = DEFAULT_BASE_MODEL, **overrides) -> dict:
    return {"base_model": base_model, "dataset": data_name, "method": "lora", "objective": "sft", **overrides}


def submit_job(store: ObjectStore, tenant: str, job: str, files: dict[str, bytes], manifest: dict | bytes) -> str:
    """Write the data files, then the manifest: the manifest's arrival is the submission."""
    validate_name("tenant", tenant)
    validate_name("job", job)
    manifest_bytes = manifest if isinstance(manifest, bytes) else yaml.safe_dump(manifest, sort_keys=False).encode()
    parsed = parse_manifest(manifest_bytes, source="manifest")  # refuse a bad manifest before uploading anything
    missing = {name for name in (parsed.dataset, parsed.eval_dataset) if name is not None} - set(files)
    if missing:
        raise ValueError(f"the manifest names {sorted(missing)}, which are not being uploaded")
    for name, data in files.items():
        store.write_bytes(job_file_key(tenant, job, name), data)
    key = manifest_key(tenant, job)
    store.write_bytes(key, manifest_bytes)
    return key


def submit_paths(store: ObjectStore, tenant: str, job: str, data: Path, manifest: Path | None,
                 eval_data: Path | None = None) -> str:
    files = {data.name: data.read_bytes()}
    if eval_data:
        files[eval_data.name] = eval_data.read_bytes()
    if manifest is not None:
        body: dict | bytes = manifest.read_bytes()
    else:
        body = default_manifest(data.name, **({"eval_dataset": eval_data.name} if eval_data else {}))
    return submit_job(store, tenant, job, files, body)
