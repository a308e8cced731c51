"""Device leases: which GPUs of a pool each run's trainer may use, claimed atomically.

Dagster's queue guarantees that no more runs hold a pool than it has slots; it does not say *which* GPUs
of a node a run gets. A lease claims specific device ids of the pool for one run, so that the trainer is
pinned to them with ``CUDA_VISIBLE_DEVICES`` and two runs never share a device. A lease is released when
its run's GPU work ends, however it ends; a lease whose holder is dead (the run finished without
releasing it, or its worker process is gone) is reclaimed by the next claim on the pool.

The leases live in the catalog; a claim holds the pool's lock for its transaction (``ftpipe.catalog.db``),
so reading what is free and claiming it cannot interleave with another claim on the same pool.
"""

from __future__ import annotations

import os
import socket
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable, Iterator

from ftpipe.catalog.db import CatalogTable


class NoFreeDevices(RuntimeError):
    """More runs hold the pool than it has devices: its slots in dagster.yaml disagree with tenants.yaml,
    or a holder is alive that should not be."""


@dataclass(frozen=True)
class Lease:
    pool: str
    device: int
    run_id: str
    host: str
    pid: int
    acquired_at: datetime


def process_is_gone(lease: Lease) -> bool:
    """True when the lease's holder ran on this host and its process no longer exists."""
    if lease.host != socket.gethostname():
        return False
    try:
        os.kill(lease.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, owned by someone else
        return False
    return False


class DeviceLeases(CatalogTable):

    def acquire(self, pool: str, devices_in_pool: int, count: int, run_id: str,
                is_dead: Callable[[Lease], bool] = process_is_gone) -> list[int]:
        """Claim ``count`` devices of ``pool`` for ``run_id`` (the lowest free ids), reclaiming dead leases
        first. A run that already holds devices of the pool gets the same ones back."""
        with self._connect() as con:
            con.lock(f"device_leases:{pool}")
            held = [Lease(*row) for row in con.execute(
                "SELECT pool, device, run_id, host, pid, acquired_at FROM device_leases WHERE pool = ?",
                [pool]).fetchall()]
            mine = sorted(lease.device for lease in held if lease.run_id == run_id)
            if mine:
                return mine
            for lease in held:
                if is_dead(lease):
                    con.execute("DELETE FROM device_leases WHERE pool = ? AND device = ?", [pool, lease.device])
            taken = {row[0] for row in con.execute("SELECT device FROM device_leases WHERE pool = ?",
                                                   [pool]).fetchall()}
            free = [d for d in range(devices_in_pool) if d not in taken]
            if len(free) < count:
                raise NoFreeDevices(f"pool {pool}: run {run_id} needs {count} device(s), {len(free)} of "
                                    f"{devices_in_pool} are free (held: {sorted(taken)})")
            claimed = free[:count]
            now = datetime.now(timezone.utc)
            for device in claimed:
                con.execute("INSERT INTO device_leases (pool, device, run_id, host, pid, acquired_at) "
                            "VALUES (?, ?, ?, ?, ?, ?)",
                            [pool, device, run_id, socket.gethostname(), os.getpid(), now])
        return claimed

    def release(self, run_id: str) -> None:
        with self._connect() as con:
            con.execute("DELETE FROM device_leases WHERE run_id = ?", [run_id])

    def held(self, pool: str | None = None) -> list[Lease]:
        if not self._exists():
            return []
        with self._connect() as con:
            rows = con.execute("SELECT pool, device, run_id, host, pid, acquired_at FROM device_leases"
                               + (" WHERE pool = ?" if pool else "") + " ORDER BY pool, device",
                               [pool] if pool else []).fetchall()
        return [Lease(*row) for row in rows]

    @contextmanager
    def hold(self, pool: str, devices_in_pool: int, count: int, run_id: str,
             is_dead: Callable[[Lease], bool] = process_is_gone) -> Iterator[list[int]]:
        devices = self.acquire(pool, devices_in_pool, count, run_id, is_dead)
        try:
            yield devices
        finally:
            self.release(run_id)
