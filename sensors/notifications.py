"""Tenants' webhooks, sent by sensors once a run has ended: never from inside a run, which holds a GPU slot.

A run that registered an adapter left a notice (``ftpipe.notify.outbox``): ``job.succeeded`` for a promoted
adapter, ``job.gate_failed`` for a draft. This sensor sends the first; the failure sensor sends the second,
or ``job.failed`` when a failure is final. Each delivery has a short total budget
(``ftpipe.notify.webhooks``), so a tenant's slow endpoint delays a tick by seconds, not the queue.
"""

from __future__ import annotations

from collections.abc import Callable

from dagster import DagsterRun, DagsterRunStatus, DefaultSensorStatus, RunStatusSensorContext, run_status_sensor

from ft_assets.jobs import finetune_job
from ftpipe.notify.outbox import delivery_id, read_notice
from ftpipe.notify.webhooks import notify_tenant
from partitions.run_tags import JOB_TAG, MANIFEST_VERSION_TAG, TENANT_TAG
from resources import ArtifactStoreResource, PlatformResource


def run_notice(artifacts: ArtifactStoreResource, run: DagsterRun) -> tuple[str, dict] | None:
    """The (event, payload) the run left for its tenant, if any."""
    tenant, job = run.tags.get(TENANT_TAG), run.tags.get(JOB_TAG)
    return read_notice(artifacts.layout().run_dir(tenant, job, run.run_id)) if tenant and job else None


def send(log: Callable[[str], None], platform: PlatformResource, run: DagsterRun, event: str, payload: dict) -> None:
    """``event`` to the run's tenant, with an id that is the same for every attempt of the job's version."""
    tenant, job = run.tags.get(TENANT_TAG), run.tags.get(JOB_TAG)
    if tenant and job:
        version = run.tags.get(MANIFEST_VERSION_TAG, run.run_id)  # a hand launch has no manifest version
        notify_tenant(platform.config(), tenant, event, delivery_id(tenant, job, version, event), payload, log=log)


@run_status_sensor(run_status=DagsterRunStatus.SUCCESS, monitored_jobs=[finetune_job], minimum_interval_seconds=10,
                   default_status=DefaultSensorStatus.RUNNING)
def notify_succeeded_jobs(context: RunStatusSensorContext, platform: PlatformResource,
                          artifacts: ArtifactStoreResource):
    notice = run_notice(artifacts, context.dagster_run)
    if notice:
        send(context.log.info, platform, context.dagster_run, *notice)
