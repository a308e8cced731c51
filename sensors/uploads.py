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
"""

import json
from datetime import datetime, timezone

from dagster import (
    DefaultSensorStatus,
    RunRequest,
    SensorEvaluationContext,
    SensorResult,
    sensor,
)

from ft_assets.jobs import finetune_job
from ftpipe.basemodel.registry import BaseModelNotFound
from ftpipe.landing import TENANTS_PREFIX, match_manifest_key, results_key
from ftpipe.manifest import ManifestError, parse_manifest
from ftpipe.metering.ledger import month_of
from ftpipe.metering.quota import decide_for_tenant
from ftpipe.objectstore import ObjectExists
from ftpipe.routing import route
from ftpipe.tenants import PlatformConfig
from ftpipe.training.memory import ModelShape
from ftpipe.training.spec import TrainJobSpec
from partitions.keys import InvalidName, partition_key
from partitions.tenant_jobs import tenant_jobs_partitions
from resources import (
    BaseModelsResource,
    CatalogResource,
    LandingZoneResource,
    PlatformResource,
)
from sensors.run_tags import MANIFEST_VERSION_TAG, OVER_QUOTA_TAG, POOL_TAG, run_tags


@sensor(job=finetune_job, minimum_interval_seconds=5, default_status=DefaultSensorStatus.RUNNING)
def upload_sensor(context: SensorEvaluationContext, landing: LandingZoneResource, platform: PlatformResource,
                  base_models: BaseModelsResource, catalog: CatalogResource) -> SensorResult:
    store = landing.store()
    config = platform.config()
    known = set(context.instance.get_dynamic_partitions(tenant_jobs_partitions.name))
    seen: dict[str, str] = json.loads(context.cursor) if context.cursor else {}
    new_keys: list[str] = []
    requests: list[RunRequest] = []
    listed: set[str] = set()
    month = month_of(datetime.now(timezone.utc))
    used_hours: dict[str, float] | None = None  # read from the ledger once per tick, only when needed
    for obj in store.list(TENANTS_PREFIX):
        match = match_manifest_key(obj.key)
        if match is None:
            continue
        tenant, job = match
        try:
            key = partition_key(tenant, job)
        except InvalidName as exc:
            context.log.warning(f"ignoring {obj.key}: {exc}")
            continue
        if tenant not in config.tenants:
            _reject_once(store, tenant, job, f"tenant '{tenant}' is not configured on this platform")
            context.log.warning(f"ignoring {obj.key}: tenant '{tenant}' is not configured")
            continue
        listed.add(key)
        if seen.get(key) == obj.version:
            continue
        seen[key] = obj.version
        if used_hours is None:
            used_hours = catalog.ledger().charged_hours(month)
        quota = decide_for_tenant(config, tenant, used_hours.get(tenant, 0.0), month)
        pool, refusal = _admit(store.read_bytes(obj.key), obj.key, config, base_models)
        refusal = refusal or (None if quota.allowed else quota.message)
        if refusal:
            _reject(store, tenant, job, refusal)
            context.log.warning(f"refused {key}: {refusal}")
            continue
        if key not in known and key not in new_keys:
            new_keys.append(key)
        requests.append(RunRequest(
            run_key=f"{key}@{obj.version}",
            partition_key=key,
            tags={**run_tags(config, tenant, job), POOL_TAG: pool, MANIFEST_VERSION_TAG: obj.version,
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


def _admit(manifest_bytes: bytes, source: str, config: PlatformConfig,
           base_models: BaseModelsResource) -> tuple[str, str | None]:
    """(pool, None) for a job to queue, or (None, why) for a job no pool can run."""
    try:
        manifest = parse_manifest(manifest_bytes, source=source)
        base = base_models.registry().resolve(manifest.base_model)
    except (ManifestError, BaseModelNotFound):
        return config.default_pool, None
    hyperparameters = manifest.hyperparameters
    decision = route(config, ModelShape.from_pretrained_dir(base.path, base.num_parameters), manifest.method,
                     manifest.objective, int(hyperparameters.get("max_seq_len", TrainJobSpec.max_seq_len)),
                     lora_r=int(hyperparameters["lora_r"]) if "lora_r" in hyperparameters else None)
    if decision.pool is None:
        return None, decision.refusal()
    return decision.pool, None


def _reject(store, tenant: str, job: str, reason: str) -> None:
    """The results area is the platform's: a refusal of a re-submitted manifest replaces the earlier one."""
    store.write_bytes(results_key(tenant, job, "rejected.md"), f"# Job rejected\n\n{reason}\n".encode(),
                      overwrite=True)


def _reject_once(store, tenant: str, job: str, reason: str) -> None:
    try:
        store.write_bytes(results_key(tenant, job, "rejected.md"), f"# Job rejected\n\n{reason}\n".encode())
    except ObjectExists:
        pass
