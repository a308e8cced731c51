"""monthly_billing: each tenant's GPU-hours, refunds, overage and cost for a month, from the usage ledger."""

from datetime import timedelta
from pathlib import Path

import polars as pl
from dagster import (
    AllPartitionMapping,
    AssetDep,
    AssetExecutionContext,
    DefaultScheduleStatus,
    MaterializeResult,
    MetadataValue,
    RunRequest,
    ScheduleEvaluationContext,
    TableColumn,
    TableRecord,
    TableSchema,
    asset,
    define_asset_job,
    schedule,
)

from ftpipe.landing import statement_key
from ftpipe.metering.billing import monthly_bills, statement_markdown
from partitions.billing_months import billing_months
from resources import (
    ArtifactStoreResource,
    CatalogResource,
    LandingZoneResource,
    PlatformResource,
)

BILLS_SCHEMA = TableSchema(columns=[
    TableColumn("tenant", "string"), TableColumn("tier", "string"), TableColumn("gpu_hours", "float"),
    TableColumn("refunded_gpu_hours", "float"), TableColumn("overage_gpu_hours", "float"),
    TableColumn("total", "float", description="the month's charge, overage included")])


# The month's ledger rows are written by the training step of every tenant job (lineage only).
@asset(partitions_def=billing_months, group_name="billing", kinds={"sql"},
       deps=[AssetDep("adapter", partition_mapping=AllPartitionMapping())])
def monthly_billing(context: AssetExecutionContext, catalog: CatalogResource, platform: PlatformResource,
                    artifacts: ArtifactStoreResource, landing: LandingZoneResource) -> MaterializeResult:
    """The month's bill per tenant: ``billing/{month}.csv`` for the platform, and a statement listing every
    attempt in each tenant's landing zone (``tenants/{tenant}/billing/{month}.md``)."""
    month = context.partition_key[:7]  # the partition key is the month's first day
    config = platform.config()
    usage = catalog.ledger().records(month=month)
    bills = monthly_bills(usage, config, month)
    out = Path(artifacts.root) / "billing" / f"{month}.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    table = pl.DataFrame([b.row() for b in bills]) if bills else pl.DataFrame()
    table.write_csv(out)
    store = landing.store()
    for bill in bills:
        if bill.tenant in config.tenants:  # a deleted tenant keeps its ledger rows, not a landing zone
            store.write_bytes(statement_key(bill.tenant, month),
                              statement_markdown(bill, [u for u in usage if u.tenant == bill.tenant]).encode(),
                              overwrite=True)
    context.log.info(f"{month}: {len(bills)} tenant(s), {len(usage)} attempt(s)")
    return MaterializeResult(metadata={
        "dagster/row_count": len(bills),
        "tenants": len(bills),
        "attempts": len(usage),
        "gpu_hours": round(sum(b.gpu_hours for b in bills), 6),
        "refunded_gpu_hours": round(sum(b.refunded_gpu_hours for b in bills), 6),
        "total": round(sum(b.total for b in bills), 2),
        "csv": MetadataValue.path(str(out)),
        "bills": MetadataValue.table(
            [TableRecord({"tenant": b.tenant, "tier": b.tier, "gpu_hours": round(b.gpu_hours, 4),
                          "refunded_gpu_hours": round(b.refunded_gpu_hours, 4),
                          "overage_gpu_hours": round(b.overage_gpu_hours, 4), "total": round(b.total, 2)})
             for b in bills], schema=BILLS_SCHEMA),
    })


billing_job = define_asset_job("billing_rollup", selection=[monthly_billing])


@schedule(job=billing_job, cron_schedule="0 4 * * *", default_status=DefaultScheduleStatus.RUNNING)
def billing_schedule(context: ScheduleEvaluationContext):
    """Every night the current month's running total; on the 1st, also the final bill of the month before
    (attempts that were still running at midnight belong to the month they started in)."""
    now = context.scheduled_execution_time
    keys = [now.strftime("%Y-%m-01")]
    if now.day == 1:
        keys.append((now - timedelta(days=1)).strftime("%Y-%m-01"))
    return [RunRequest(run_key=f"billing-{key}-{now:%Y-%m-%d}", partition_key=key) for key in keys]
