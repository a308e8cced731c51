"""One process of bench/catalog.py's throughput measurement: a mixed loop of the catalog's writes, started with
the others at one instant. Apart from the script so that each spawned process imports only the catalog, not
Dagster (as tests/helpers/catalog_race.py)."""

from __future__ import annotations

import time
from datetime import datetime, timezone

from ftpipe.catalog.adapters import AdapterRecord, AdapterRegistry
from ftpipe.leases import DeviceLeases
from ftpipe.metering.ledger import UsageLedger, UsageRecord

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=timezone.utc)
MONTH = "2026-11"
POOL = "bench"
# Long enough that processes waiting for the DuckDB file wait rather than fail (PostgreSQL ignores it).
LOCK_TIMEOUT_S = 300


def usage(run_id: str, tenant: str) -> UsageRecord:
    return UsageRecord.measure(run_id, tenant, "job", 1, "h100x1", 1, 2.0, T0, T0.replace(hour=10), "completed")


def adapter(adapter_id: str, tenant: str) -> AdapterRecord:
    return AdapterRecord(adapter_id, tenant, "job", adapter_id, "base", "bd", "dd", "ch", "lora", 8, "/a",
                         {"eval_loss": 1.0}, "draft", T0)


def stores(location: str) -> tuple[UsageLedger, DeviceLeases, AdapterRegistry]:
    return (UsageLedger(location, lock_timeout_s=LOCK_TIMEOUT_S), DeviceLeases(location, lock_timeout_s=LOCK_TIMEOUT_S),
            AdapterRegistry(location, lock_timeout_s=LOCK_TIMEOUT_S))


def mixed_op(i: int, tag: str, ledger: UsageLedger, leases: DeviceLeases, registry: AdapterRegistry,
             devices_in_pool: int) -> None:
    """Operation ``i`` of the loop: a ledger row, a lease of one device claimed and released, or an adapter, in
    turn. ``tag`` makes the run and adapter ids unique to the process."""
    kind = i % 3
    if kind == 0:
        ledger.record(usage(f"{tag}-rec-{i}", f"tenant{i % 20:02d}"))
    elif kind == 1:
        leases.acquire(POOL, devices_in_pool, 1, f"{tag}-lease-{i}")
        leases.release(f"{tag}-lease-{i}")
    else:
        registry.register(adapter(f"{tag}-adapter-{i}", f"tenant{i % 20:02d}"))


def work(location: str, tag: str, ops: int, devices_in_pool: int, ready, go, results) -> None:
    """Open the stores and touch the catalog once (a process's first connection checks the schema), say so,
    wait for the start, then run ``ops`` mixed operations; put (tag, seconds, per-op seconds) or an error."""
    try:
        ledger, leases, registry = stores(location)
        ledger.charged_hours(MONTH)
    except Exception as exc:  # reported, so that the script fails with the cause instead of a queue timeout
        ready.put(tag)
        results.put((tag, f"error while opening: {exc!r}"))
        return
    ready.put(tag)
    go.wait()
    latencies = []
    try:
        start = time.perf_counter()
        for i in range(ops):
            t = time.perf_counter()
            mixed_op(i, tag, ledger, leases, registry, devices_in_pool)
            latencies.append(time.perf_counter() - t)
        results.put((tag, time.perf_counter() - start, latencies))
    except Exception as exc:
        results.put((tag, f"error at operation {len(latencies)}: {exc!r}"))
