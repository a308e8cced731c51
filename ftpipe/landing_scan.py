"""What one tick of the upload sensor lists, at a cost that does not grow with the landing zone.

The landing zone only grows: every data file, API upload, report and statement ever written stays. A
manifest can only be at ``tenants/{tenant}/jobs/{job}/manifest.yaml``, so a scan lists the tenant folders
(S3: one delimited request per 1,000 tenants), then each tenant's ``jobs/`` folder in installments of at
most ``budget`` keys per tick, going on from where the last tick stopped (S3's ``StartAfter``). Results,
API files and billing statements are never listed. A tenant whose ``jobs/`` folder holds more keys than a
tick's budget is swept over several ticks: its new manifests wait for the sweep to reach them, and no other
tenant's do. So a tick costs one list request per tenant (with the default budget) and one per 1,000 tenants,
however many files and finished jobs there are; what grows with a tenant's own folder is how many ticks its
sweep takes (a manifest and a data file per job: 500 jobs a tick).

A folder under ``tenants/`` whose name is not a tenant name is not listed at all: no key is ever built
from an invalid tenant name.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from ftpipe.landing import TENANTS_PREFIX
from ftpipe.objectstore import FOLDER, ObjectInfo, ObjectStore
from partitions.keys import InvalidName, validate_name

SCAN_BUDGET = 1000
"""Keys listed per tenant per tick: one S3 list request."""


@dataclass(frozen=True)
class TenantSweep:
    """The keys of one tenant's ``jobs/`` folder that a tick listed: those after ``start_after``, up to and
    including ``end`` (``None``: to the end of the folder)."""

    start_after: str
    end: str | None

    def covers(self, key: str) -> bool:
        return key > self.start_after and (self.end is None or key <= self.end)

    @property
    def next_start(self) -> str:
        return self.end or ""


@dataclass
class Scan:
    objects: list[ObjectInfo] = field(default_factory=list)
    """Everything listed under the tenants' ``jobs/`` folders this tick, in key order per tenant."""
    sweeps: dict[str, TenantSweep] = field(default_factory=dict)
    """By tenant folder name: what was listed of it. A tenant folder that is gone has none."""
    invalid: list[str] = field(default_factory=list)
    """Folders under ``tenants/`` whose names are not tenant names (their keys, e.g. ``tenants/Bad_Name``)."""
    unreadable: dict[str, str] = field(default_factory=dict)
    """Tenant folders whose ``jobs/`` could not be listed this tick, with the reason: looked at again next tick.
    When none could be, ``scan`` raises instead, and the tick fails where operators see it."""

    def positions(self) -> dict[str, str]:
        """Where each tenant's next sweep starts; tenants swept to the end start again from the beginning."""
        return {tenant: sweep.next_start for tenant, sweep in self.sweeps.items() if sweep.next_start}


def jobs_prefix(tenant_folder: str) -> str:
    return f"{TENANTS_PREFIX}{tenant_folder}/jobs/"


def scan(store: ObjectStore, positions: dict[str, str], budget: int = SCAN_BUDGET) -> Scan:
    out = Scan()
    starts: dict[str, str] = {}
    for child in store.list_children(TENANTS_PREFIX):
        if child.kind != FOLDER:
            continue  # a file or a link beside the tenant folders is nobody's job
        tenant = child.key[len(TENANTS_PREFIX):]
        try:
            validate_name("tenant", tenant)
        except InvalidName:
            out.invalid.append(child.key)
            continue
        start = positions.get(tenant, "")
        # A position from another layout, or tampered with, starts the sweep from the beginning.
        starts[tenant] = start if start.startswith(jobs_prefix(tenant)) else ""

    def listing(tenant: str):
        return store.list_page(jobs_prefix(tenant), starts[tenant], budget)

    # On S3 a request per tenant, several at a time: a tick's wall time grows with tenants / threads. A local
    # listing is the CPU's work under the GIL, where threads only add overhead.
    error: Exception | None = None
    with ThreadPoolExecutor(getattr(store, "parallel_listings", 1)) as pool:
        futures = {tenant: pool.submit(listing, tenant) for tenant in starts}
    for tenant, future in futures.items():
        start = starts[tenant]
        try:
            page, more = future.result()
        except Exception as exc:  # noqa: BLE001 - e.g. a folder its tenant made unreadable: only its jobs wait
            out.unreadable[tenant] = f"{type(exc).__name__}: {exc}"
            out.sweeps[tenant] = TenantSweep(start, start)  # covers nothing: what is known of it is kept
            error = exc
            continue
        out.objects += page
        out.sweeps[tenant] = TenantSweep(start, page[-1].key if more else None)
    if error is not None and len(out.unreadable) == len(out.sweeps):
        raise error  # no tenant could be listed: the platform's problem (credentials, the store), not a tenant's
    return out
