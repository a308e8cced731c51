"""A month's bill per tenant, from the usage ledger: GPU-hours charged and refunded, cost and overage."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass

from ftpipe.metering.ledger import UsageRecord
from ftpipe.tenants import PlatformConfig


@dataclass(frozen=True)
class TenantBill:
    tenant: str
    tier: str
    month: str
    attempts: int
    gpu_hours: float            # billable
    refunded_gpu_hours: float   # used, but the platform's fault
    cost: float
    refunded_cost: float
    quota_gpu_hours: float | None
    overage_gpu_hours: float    # billable hours beyond a soft quota
    overage_cost: float         # the surcharge on them (overage_price_multiplier - 1)
    total: float

    def row(self) -> dict:
        return asdict(self)


def monthly_bills(records: list[UsageRecord], config: PlatformConfig, month: str) -> list[TenantBill]:
    """Bills for every tenant with usage in ``month``; attempts are taken in the order they started, so the
    hours that cross a quota are the later ones."""
    by_tenant: dict[str, list[UsageRecord]] = defaultdict(list)
    for record in sorted(records, key=lambda r: r.started_at):
        if record.month == month:
            by_tenant[record.tenant].append(record)
    bills = []
    for tenant, usage in sorted(by_tenant.items()):
        tier_name = config.tenants[tenant].tier if tenant in config.tenants else "unknown"
        tier = config.tiers.get(tier_name)
        quota = tier.gpu_hours_per_month if tier else None
        multiplier = tier.overage_price_multiplier if tier else 1.0
        charged = [r for r in usage if r.billable]
        refunded = [r for r in usage if not r.billable]
        used = overage_hours = overage_cost = 0.0
        for record in charged:
            beyond = max(0.0, used + record.gpu_hours - max(quota, used)) if quota is not None else 0.0
            overage_hours += beyond
            overage_cost += beyond * record.price_per_gpu_hour * (multiplier - 1)
            used += record.gpu_hours
        cost = sum(r.cost for r in charged)
        bills.append(TenantBill(
            tenant=tenant, tier=tier_name, month=month, attempts=len(usage), gpu_hours=used,
            refunded_gpu_hours=sum(r.gpu_hours for r in refunded), cost=cost,
            refunded_cost=sum(r.cost for r in refunded), quota_gpu_hours=quota, overage_gpu_hours=overage_hours,
            overage_cost=overage_cost, total=cost + overage_cost))
    return bills


def statement_markdown(bill: TenantBill, usage: list[UsageRecord]) -> str:
    """The tenant's own statement: every attempt, what it cost, and why a refunded one was refunded."""
    quota = f"{bill.quota_gpu_hours:g} GPU-hours" if bill.quota_gpu_hours is not None else "none"
    lines = [f"# GPU usage for {bill.tenant}, {bill.month}", "",
             f"- tier: {bill.tier} (monthly quota: {quota})",
             f"- billable: {bill.gpu_hours:.4f} GPU-hours, {bill.cost:.2f}",
             f"- refunded (the platform's fault): {bill.refunded_gpu_hours:.4f} GPU-hours, {bill.refunded_cost:.2f}",
             f"- overage: {bill.overage_gpu_hours:.4f} GPU-hours, surcharge {bill.overage_cost:.2f}",
             f"- total due: {bill.total:.2f}", "",
             "| job | attempt | started (UTC) | pool | GPUs | GPU-hours | outcome | billed |",
             "|---|---|---|---|---|---|---|---|"]
    for r in usage:
        lines.append(f"| {r.job} | {r.attempt} | {r.started_at:%Y-%m-%d %H:%M:%S} | {r.pool} | {r.gpus} | "
                     f"{r.gpu_hours:.4f} | {r.category} | {'yes' if r.billable else 'refunded'} |")
    return "\n".join(lines) + "\n"
