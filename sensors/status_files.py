"""``results/{job}/status.json``: the job's state for tenants who only have the bucket, rewritten whenever one
of its runs changes state (queued, started, succeeded, failed, cancelled, requeued).

The document is the state part of the API's job object (``sensors.job_state``), so a tenant polling the file
reads what ``GET /v1/fine_tuning/jobs/{id}`` would answer. The cursor is the last run update seen: each tick
reads only the runs that changed since, however many jobs the platform has run.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

from dagster import DefaultSensorStatus, RunsFilter, SensorEvaluationContext, SkipReason, sensor

from ft_assets.partition import publish
from partitions.keys import InvalidName, validate_name
from partitions.run_tags import JOB_TAG, KIND_TAG, TENANT_JOB, TENANT_TAG
from resources import CatalogResource, LandingZoneResource
from sensors.job_state import STATUS_FILE, job_state

MAX_RUNS_PER_TICK = 500


@sensor(minimum_interval_seconds=10, default_status=DefaultSensorStatus.RUNNING)
def status_files(context: SensorEvaluationContext, landing: LandingZoneResource, catalog: CatalogResource):
    since = float(context.cursor or 0)
    records = context.instance.get_run_records(
        RunsFilter(tags={KIND_TAG: TENANT_JOB}, updated_after=datetime.fromtimestamp(since, tz=timezone.utc)),
        limit=MAX_RUNS_PER_TICK, order_by="update_timestamp", ascending=True)
    if not records:
        return SkipReason("no run changed state")
    jobs = set()
    for record in records:
        try:
            jobs.add((validate_name("tenant", record.dagster_run.tags.get(TENANT_TAG)),
                      validate_name("job", record.dagster_run.tags.get(JOB_TAG))))
        except InvalidName:
            continue  # a hand launch without a tenant job's tags has no tenant to tell
    store, adapters = landing.store(), catalog.adapters()
    for tenant, job in sorted(jobs):
        document = job_state(context.instance, store, adapters, tenant, job).document(tenant, job)
        try:
            publish(store, tenant, job, STATUS_FILE, json.dumps(document, indent=2))
        except (OSError, ValueError) as exc:  # a tenant that broke its own results area is told nothing
            context.log.warning(f"could not write {tenant}/{job}'s {STATUS_FILE}: {exc}")
    context.update_cursor(str(max(r.update_timestamp.timestamp() for r in records)))
    return None
