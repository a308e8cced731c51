"""The upload sensor: a new job manifest in the landing zone becomes a partition and a queued run.

The manifest is written last, so its arrival is the submission. The cursor remembers the version of each
manifest already queued, so the same manifest seen again requests nothing, while a re-submitted (changed)
manifest queues a new run. Run keys carry the version too, as a second guard inside Dagster itself.
"""

import json

from dagster import DefaultSensorStatus, RunRequest, SensorEvaluationContext, SensorResult, sensor

from ft_assets.jobs import finetune_job
from ftpipe.landing import TENANTS_PREFIX, match_manifest_key, results_key
from ftpipe.objectstore import ObjectExists
from partitions.keys import InvalidName, partition_key
from partitions.tenant_jobs import tenant_jobs_partitions
from resources import LandingZoneResource, PlatformResource
from sensors.run_tags import MANIFEST_VERSION_TAG, run_tags


@sensor(job=finetune_job, minimum_interval_seconds=5, default_status=DefaultSensorStatus.RUNNING)
def upload_sensor(context: SensorEvaluationContext, landing: LandingZoneResource,
                  platform: PlatformResource) -> SensorResult:
    store = landing.store()
    config = platform.config()
    known = set(context.instance.get_dynamic_partitions(tenant_jobs_partitions.name))
    seen: dict[str, str] = json.loads(context.cursor) if context.cursor else {}
    new_keys: list[str] = []
    requests: list[RunRequest] = []
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
        if seen.get(key) == obj.version:
            continue
        seen[key] = obj.version
        if key not in known and key not in new_keys:
            new_keys.append(key)
        requests.append(RunRequest(
            run_key=f"{key}@{obj.version}",
            partition_key=key,
            tags={**run_tags(config, tenant, job), MANIFEST_VERSION_TAG: obj.version},
        ))
    return SensorResult(
        cursor=json.dumps(seen, sort_keys=True),
        run_requests=requests,
        dynamic_partitions_requests=[tenant_jobs_partitions.build_add_request(new_keys)] if new_keys else [],
    )


def _reject_once(store, tenant: str, job: str, reason: str) -> None:
    try:
        store.write_bytes(results_key(tenant, job, "rejected.md"), f"# Job rejected\n\n{reason}\n".encode())
    except ObjectExists:
        pass
