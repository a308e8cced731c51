"""The upload sensor: a new job manifest in the landing zone becomes a partition and a queued run.

The manifest is written last, so its arrival is the submission. The cursor remembers the version of each
manifest already queued (while it exists), so the same manifest seen again requests nothing, while a
re-submitted (changed) manifest queues a new run. Run keys carry the version too, as a second guard inside Dagster itself.

Admission routes each job to the smallest pool whose slot fits its memory estimate (``ftpipe.routing``); a
job that fits no pool is refused here, with the estimate, and never queues. A manifest that does not parse,
or names an unknown base model, is admitted to the default pool: its run fails at once on that error and
tells the tenant, as every other input error does.

Quotas are checked here too, against the month's billable GPU-hours in the usage ledger: a tenant whose
tier has a hard quota that is used up is refused (the reason lands in its results area); a job over a
soft quota queues, tagged ``ftpipe/over-quota``, and its hours are billed as overage. The pre-flight checks
the hard quota again with the job's own estimate, still before any GPU time.

Every manifest is a stranger's input. Each one is admitted on its own (``ftpipe.admission``): whatever it
holds, and whatever goes wrong with it, costs that job a ``rejected.md`` and costs the other tenants nothing.
Its version is recorded in the cursor before it is looked at, so no manifest is tried twice, and a tick
that has spent its time budget leaves the rest for the next tick instead of timing out.
"""

import json
import time
from datetime import datetime, timezone
from itertools import zip_longest

from dagster import (
    DefaultSensorStatus,
    RunRequest,
    SensorEvaluationContext,
    SensorResult,
    sensor,
)

from ft_assets.jobs import finetune_job
from ft_assets.partition import publish
from ftpipe.admission import admit
from ftpipe.landing import TENANTS_PREFIX, match_job_key, match_manifest_key
from ftpipe.manifest import MAX_MANIFEST_BYTES
from ftpipe.metering.ledger import month_of
from ftpipe.metering.quota import decide_for_tenant
from ftpipe.objectstore import FILE, ObjectInfo, ObjectTooLarge, UnsafeObject
from partitions.keys import InvalidName, partition_key
from partitions.tenant_jobs import tenant_jobs_partitions
from resources import (
    BaseModelsResource,
    CatalogResource,
    LandingZoneResource,
    PlatformResource,
)
from sensors.run_tags import MANIFEST_VERSION_TAG, OVER_QUOTA_TAG, POOL_TAG, run_tags

TICK_BUDGET_SECONDS = 30.0
"""Half of Dagster's sensor timeout (60 s): manifests not reached by then wait for the next tick."""


@sensor(job=finetune_job, minimum_interval_seconds=5, default_status=DefaultSensorStatus.RUNNING)
def upload_sensor(context: SensorEvaluationContext, landing: LandingZoneResource, platform: PlatformResource,
                  base_models: BaseModelsResource, catalog: CatalogResource) -> SensorResult:
    store = landing.store()
    config = platform.config()
    registry = base_models.registry()
    known = set(context.instance.get_dynamic_partitions(tenant_jobs_partitions.name))
    seen: dict[str, str] = json.loads(context.cursor) if context.cursor else {}
    new_keys: list[str] = []
    requests: list[RunRequest] = []
    listed: set[str] = set()
    month = month_of(datetime.now(timezone.utc))
    used_hours: dict[str, float] | None = None  # read from the ledger once per tick, only when needed
    pending: list[tuple[str, str, str, ObjectInfo]] = []
    for obj in store.list(TENANTS_PREFIX):
        # A job folder that is a link is listed as one entry: refused like a linked manifest, never entered.
        match = match_manifest_key(obj.key) or (match_job_key(obj.key) if obj.kind != FILE else None)
        if match is None:
            continue
        tenant, job = match
        try:
            key = partition_key(tenant, job)
        except InvalidName:
            key = obj.key  # still remembered, so that its warning is logged once, not every tick
        listed.add(key)
        if seen.get(key) != obj.version:
            pending.append((tenant, job, key, obj))
    deadline = time.monotonic() + TICK_BUDGET_SECONDS
    for decided, (tenant, job, key, obj) in enumerate(_one_per_tenant_in_turn(pending)):
        if decided and time.monotonic() > deadline:
            break  # not recorded: the next tick takes the rest (at least one per tick: it always progresses)
        seen[key] = obj.version  # recorded first: whatever happens below, this version is not tried again
        if key == obj.key:
            context.log.warning(f"ignoring {obj.key!r}: tenant and job names are 1-63 characters of a-z, 0-9, '-'")
            continue
        if tenant not in config.tenants:
            _reject(context, store, tenant, job, f"tenant '{tenant}' is not configured on this platform")
            continue
        if used_hours is None:  # the platform's own state: if it cannot be read, the tick fails and is retried
            used_hours = catalog.ledger().charged_hours(month)
        quota = decide_for_tenant(config, tenant, used_hours.get(tenant, 0.0), month)
        try:
            # Read only if it is a regular file of a manifest's size: never through a link, never gigabytes.
            admission = admit(store.read_bytes(obj.key, max_bytes=MAX_MANIFEST_BYTES), obj.key, config, registry)
            refusal = admission.refusal or (None if quota.allowed else quota.message)
        except (UnsafeObject, ObjectTooLarge) as exc:
            refusal = str(exc)
        except Exception:  # noqa: BLE001 - one manifest must never stop the others' intake
            context.log.exception(f"admitting {obj.key} failed; the job is refused and the others go on")
            refusal = ("the platform could not admit this job because of an internal error; the operators have "
                       "been told. Submitting the manifest again retries it.")
        if refusal:
            _reject(context, store, tenant, job, refusal)
            continue
        if key not in known and key not in new_keys:
            new_keys.append(key)
        requests.append(RunRequest(
            run_key=f"{key}@{obj.version}",
            partition_key=key,
            tags={**run_tags(config, tenant, job), POOL_TAG: admission.pool, MANIFEST_VERSION_TAG: obj.version,
                  **({OVER_QUOTA_TAG: "soft"} if quota.over_soft_quota else {})},
        ))
    # Forget manifests that are gone (a deleted tenant): the cursor stays as small as the landing zone, and
    # a job uploaded again after its deletion is new.
    seen = {key: version for key, version in seen.items() if key in listed}
    return SensorResult(
        cursor=json.dumps(seen, sort_keys=True),
        run_requests=requests,
        dynamic_partitions_requests=[tenant_jobs_partitions.build_add_request(new_keys)] if new_keys else [],
    )


def _one_per_tenant_in_turn(pending: list[tuple]) -> list[tuple]:
    """Each tenant's first new manifest, then each one's second, ..., the tenants with the fewest first: a tenant
    that uploads thousands of manifests, however slow, delays nobody's first by more than one admission, and
    when a tick runs out of time the flood is what waits."""
    by_tenant: dict[str, list[tuple]] = {}
    for item in pending:
        by_tenant.setdefault(item[0], []).append(item)
    rounds = zip_longest(*sorted(by_tenant.values(), key=len))
    return [item for round_ in rounds for item in round_ if item is not None]


def _reject(context: SensorEvaluationContext, store, tenant: str, job: str, reason: str) -> None:
    """The results area is the platform's: a refusal of a re-submitted manifest replaces the earlier one. A
    tenant that broke its own results area (a file or a link in its place) is told nothing, and only that."""
    context.log.warning(f"refused {tenant}/{job}: {reason[:500]}")
    try:
        publish(store, tenant, job, "rejected.md", f"# Job rejected\n\n{reason}\n")
    except (OSError, ValueError) as exc:
        context.log.warning(f"could not write the refusal of {tenant}/{job} into its results area: {exc}")
