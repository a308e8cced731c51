"""Helpers shared by the assets: which tenant job a run is for, and writing results back for the tenant."""

from __future__ import annotations

from dagster import AssetExecutionContext

from ftpipe.landing import results_key
from ftpipe.objectstore import ObjectStore
from partitions.keys import parse_partition_key

USER_ERROR = "user"
PLATFORM_ERROR = "platform"
ERROR_CLASS_KEY = "error_class"


def tenant_job(context: AssetExecutionContext) -> tuple[str, str]:
    return parse_partition_key(context.partition_key)


def publish(store: ObjectStore, tenant: str, job: str, name: str, text: str) -> str:
    """Write a report into the tenant's results area (platform-owned, so it may be replaced)."""
    key = results_key(tenant, job, name)
    # backslashreplace: a report quotes the tenant's input, which may hold what UTF-8 cannot encode.
    store.write_bytes(key, text.encode("utf-8", "backslashreplace"), overwrite=True)
    return key
