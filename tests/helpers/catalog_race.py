"""One process of the catalog race test: claims a device, writes the ledger and registers adapters, with 19
others doing the same at the same instant. Apart from the test module so that each spawned process imports
only the catalog, not Dagster."""

from datetime import datetime, timezone

from ftpipe.catalog.adapters import AdapterRecord, AdapterRegistry, RegistryError
from ftpipe.leases import DeviceLeases, NoFreeDevices
from ftpipe.metering.ledger import UsageLedger, UsageRecord

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=timezone.utc)


def usage(run_id: str) -> UsageRecord:
    return UsageRecord.measure(run_id, "acme", "job", 1, "h100x1", 1, 2.0, T0, T0.replace(hour=10), "completed")


def adapter(adapter_id: str) -> AdapterRecord:
    return AdapterRecord(adapter_id, "acme", "job", adapter_id, "base", "bd", "dd", "ch", "lora", 8, "/a", {},
                         "draft", T0)


def race(location: str, n: int, ready, go, queue) -> None:
    # The DuckDB file lets one process in at a time: twenty of them on two cores wait longer than the default.
    leases, ledger, registry = (cls(location, lock_timeout_s=300) for cls in (DeviceLeases, UsageLedger,
                                                                            AdapterRegistry))
    ready.put(n)
    go.wait()
    outcome: dict = {}
    try:
        try:
            outcome["devices"] = leases.acquire("race", 8, 1, f"run-{n}", is_dead=lambda lease: False)
        except NoFreeDevices:
            outcome["devices"] = None
        outcome["ledger"] = [ledger.record(usage(f"run-{n}")), ledger.record(usage(f"run-{n}")),
                             ledger.record(usage("run-shared"))]
        registry.register(adapter(f"own-{n}"))
        try:
            registry.register(adapter("shared"))
            outcome["registered_shared"] = True
        except RegistryError:
            outcome["registered_shared"] = False
        try:
            registry.set_status("shared", "promoted")
            outcome["promoted_shared"] = True
        except RegistryError:
            outcome["promoted_shared"] = False
        queue.put((n, outcome))
    except Exception as exc:  # reported, so that the test fails with the cause instead of a queue timeout
        queue.put((n, f"error: {exc!r}"))
