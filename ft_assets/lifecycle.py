"""Lifecycle jobs for operators who work in the UI: the same as ``ftpipe promote``, ``deprecate`` and
``delete-tenant``, and the daily retention of deprecated adapters."""

from datetime import datetime, timezone
from pathlib import Path

from dagster import Config, DefaultScheduleStatus, OpExecutionContext, ScheduleDefinition, job, op

from ftpipe_cli.adapters import change_status, retire_deprecated
from ftpipe_cli.delete_tenant import delete_tenant
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
