"""Helpers shared by the assets: which tenant job a run is for, writing results back for the tenant, and
ending a run on the tenant's input with one reason that the tenant and the operator both read."""

from __future__ import annotations

from dagster import AssetExecutionContext, Failure

from ftpipe.landing import results_key
from ftpipe.objectstore import ObjectStore
from partitions.keys import parse_partition_key
from partitions.run_tags import ERROR_CLASS_TAG, OUTCOME_TAG, outcome_tag_value

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


def record_outcome(context: AssetExecutionContext, reason: str, error_class: str | None = None) -> None:
    """Put the run's one-line outcome where the Runs list shows it, as a tag, the moment it is decided."""
    context.instance.add_run_tags(context.run.run_id, {OUTCOME_TAG: outcome_tag_value(reason, error_class),
                                                   **({ERROR_CLASS_TAG: error_class} if error_class else {})})


def fail_on_input(context: AssetExecutionContext, store: ObjectStore, tenant: str, job: str, message: str,
                  report: str | None = "rejected.md") -> Failure:
    """The Failure that ends a run on the tenant's input (bad data, a failed gate, a quota): the tenant's report,
    the run's outcome tag and an ERROR log line all say the same thing, and the step fails before its asset
    is materialized, so the partition shows failed at the stage that refused it. ``report=None`` when the
    step has written its own report (validation.md, quality_gates.md)."""
    if report:
        publish(store, tenant, job, report, f"# Job {tenant}/{job} was rejected\n\n{message}\n")
    context.log.error(message)
    record_outcome(context, message, USER_ERROR)
    return Failure(description=message, metadata={ERROR_CLASS_KEY: USER_ERROR}, allow_retries=False)
