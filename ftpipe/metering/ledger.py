"""The GPU usage ledger: one catalog row per training attempt, written once.

An attempt is one run of a tenant job (a resumed or retried job is a new run, with the next attempt
number). The row's key is the run id, and ``record`` ignores a second write of the same run: the training
asset and the failure sensor may both report one attempt, and a sensor tick may be evaluated twice, yet
the tenant is billed once. The price per GPU-hour is copied into the row at the time of use, so a later
price change never rewrites an old bill.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from datetime import datetime, timedelta, timezone

from ftpipe.catalog.db import CatalogTable
from ftpipe.metering.classify import classify


@dataclass(frozen=True)
class UsageRecord:
    run_id: str
    tenant: str
    job: str
    attempt: int
    pool: str
    gpus: int
    price_per_gpu_hour: float
    started_at: datetime
    ended_at: datetime
    gpu_seconds: float
    outcome: str
    category: str
    billable: bool
    reason: str | None
    month: str

    @classmethod
    def measure(cls, run_id: str, tenant: str, job: str, attempt: int, pool: str, gpus: int,
                price_per_gpu_hour: float, started_at: datetime, ended_at: datetime, outcome: str,
                error_class: str | None = None, reason: str | None = None) -> "UsageRecord":
        """GPU-seconds are wall time from trainer start to stop times the GPUs the slot holds, whether or not
        the trainer kept them busy: the slot was the tenant's for that long."""
        verdict = classify(outcome, error_class)
        wall = max(0.0, (ended_at - started_at).total_seconds())
        return cls(run_id, tenant, job, attempt, pool, gpus, price_per_gpu_hour, started_at, ended_at,
                   wall * gpus, outcome, verdict.category, verdict.billable, reason, month_of(started_at))

    @property
    def gpu_hours(self) -> float:
        return self.gpu_seconds / 3600

    @property
    def cost(self) -> float:
        return self.gpu_hours * self.price_per_gpu_hour


def month_of(moment: datetime) -> str:
    """The billing month of a moment (UTC): an attempt belongs to the month it started in."""
    return moment.astimezone(timezone.utc).strftime("%Y-%m")


def month_bounds(month: str) -> tuple[datetime, datetime]:
    start = datetime.strptime(month, "%Y-%m").replace(tzinfo=timezone.utc)
    end = (start + timedelta(days=32)).replace(day=1)
    return start, end


class UsageLedger(CatalogTable):

    def record(self, usage: UsageRecord) -> bool:
        """Write an attempt's usage; False (and nothing written) when that run is already recorded."""
        names = [f.name for f in fields(UsageRecord)]
        with self._connect() as con:
            written = con.execute(f"INSERT INTO gpu_usage ({', '.join(names)}) VALUES ({', '.join('?' * len(names))}) "
                                  "ON CONFLICT DO NOTHING RETURNING run_id",
                                  [asdict(usage)[n] for n in names]).fetchone()
        return written is not None

    def has(self, run_id: str) -> bool:
        return bool(self.records(run_id=run_id))

    def records(self, month: str | None = None, tenant: str | None = None,
                run_id: str | None = None) -> list[UsageRecord]:
        if not self._exists():
            return []
        where, params = [], []
        for column, value in (("month", month), ("tenant", tenant), ("run_id", run_id)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        names = [f.name for f in fields(UsageRecord)]
        sql = (f"SELECT {', '.join(names)} FROM gpu_usage" + (f" WHERE {' AND '.join(where)}" if where else "")
               + " ORDER BY started_at, run_id")
        with self._connect() as con:
            rows = con.execute(sql, params).fetchall()
        return [UsageRecord(*row) for row in rows]

    def charged_hours(self, month: str) -> dict[str, float]:
        """Billable GPU-hours per tenant in a month: what quotas are measured against."""
        if not self._exists():
            return {}
        with self._connect() as con:
            rows = con.execute("SELECT tenant, sum(gpu_seconds) / 3600 FROM gpu_usage WHERE month = ? AND billable "
                               "GROUP BY tenant", [month]).fetchall()
        return {tenant: float(hours) for tenant, hours in rows}
