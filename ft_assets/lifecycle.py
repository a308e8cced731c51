"""Lifecycle jobs for operators who work in the UI: the same as ``ftpipe promote``, ``deprecate`` and
``delete-tenant``, and the nightly retention of deprecated adapters and of checkpoints."""

from datetime import datetime, timedelta, timezone
from pathlib import Path

from dagster import Config, DefaultScheduleStatus, OpExecutionContext, ScheduleDefinition, job, op

from ft_assets.tenant_deletion import delete_tenant
from ftpipe.catalog.lifecycle import change_status, retire_deprecated
from ftpipe.training.retention import apply_retention
from resources import (
    ArtifactStoreResource,
    BaseModelsResource,
    CatalogResource,
    LandingZoneResource,
    PlatformResource,
)


class StatusChange(Config):
    adapter_id: str
    status: str  # promoted | deprecated | archived


@op
def set_adapter_status(context: OpExecutionContext, config: StatusChange, catalog: CatalogResource,
                       base_models: BaseModelsResource, platform: PlatformResource,
                       artifacts: ArtifactStoreResource) -> None:
    record = change_status(catalog.adapters(), config.adapter_id, config.status, base_models.registry(),
                           platform.config().serving, Path(artifacts.root) / "serving")
    context.log.info(f"{record.adapter_id} is now {record.status}")


@job(description="Promote, deprecate or archive a registered adapter (run config: adapter_id, status)")
def adapter_lifecycle():
    set_adapter_status()


@op
def retire_expired_adapters(context: OpExecutionContext, catalog: CatalogResource,
                            artifacts: ArtifactStoreResource) -> None:
    retired = retire_deprecated(catalog.adapters(), datetime.now(timezone.utc), Path(artifacts.root) / "serving")
    context.log.info(f"archived {len(retired)} adapter(s) deprecated over 30 days ago: {retired}")


@job(description="Delete the files of adapters deprecated more than 30 days ago (their registry rows stay)")
def adapter_retention():
    retire_expired_adapters()


retention_schedule = ScheduleDefinition(job=adapter_retention, cron_schedule="0 3 * * *",
                                        default_status=DefaultScheduleStatus.RUNNING)


@op
def prune_checkpoints(context: OpExecutionContext, platform: PlatformResource,
                      artifacts: ArtifactStoreResource) -> None:
    policy = platform.config().retention
    report = apply_retention(artifacts.root, policy.keep_checkpoints, timedelta(hours=policy.idle_hours),
                             datetime.now(timezone.utc))
    for path in report.removed:
        context.log.info(f"removed {path}")
    context.log.info(f"checkpoint retention freed {report.freed_bytes / 2**20:.1f} MiB in {len(report.removed)} "
                     f"folder(s); kept {len(report.final_adapters)} final adapter(s) read-only; "
                     f"{len(report.skipped_active)} active training folder(s) left alone")


@job(description="Keep the newest checkpoints and the final adapter of idle training folders (tenants.yaml: "
                 "retention)")
def checkpoint_retention():
    prune_checkpoints()


checkpoint_retention_schedule = ScheduleDefinition(job=checkpoint_retention, cron_schedule="30 3 * * *",
                                                   default_status=DefaultScheduleStatus.RUNNING)


class TenantToDelete(Config):
    tenant: str


@op
def delete_tenant_data(context: OpExecutionContext, config: TenantToDelete, catalog: CatalogResource,
                       landing: LandingZoneResource, artifacts: ArtifactStoreResource) -> None:
    report = delete_tenant(config.tenant, context.instance, landing.store(), artifacts.layout(), catalog.adapters(),
                           Path(artifacts.root) / "serving")
    context.log.info(report.to_text())


@job(name="delete_tenant",
     description="Delete everything of one tenant (run config: tenant); this run is kept as the record")
def delete_tenant_job():
    delete_tenant_data()
