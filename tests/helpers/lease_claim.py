"""A device claim in its own process, for the lease race tests. Kept apart from the test module so that each
spawned process imports only the lease code, not Dagster."""

from ftpipe.leases import DeviceLeases, NoFreeDevices


def claim(db: str, run_id: str, queue) -> None:
    # Ten processes starting at once on two cores can wait long for the catalog's file lock: the test is about
    # who gets which device, not how fast, so they wait longer than the platform's default.
    try:
        queue.put((run_id, DeviceLeases(db, lock_timeout_s=300).acquire("h100x1", 8, 1, run_id)))
    except NoFreeDevices as exc:
        queue.put((run_id, str(exc)))
    except Exception as exc:  # reported, so that the test fails with the cause instead of a queue timeout
        queue.put((run_id, f"error: {exc!r}"))
