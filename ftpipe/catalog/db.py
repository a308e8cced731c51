"""Short-lived DuckDB connections to the catalog file, shared by the registry and the usage ledger.

Several run workers, sensors and the CLI (separate processes) write to the same file, and DuckDB allows
one writer process at a time: a connection is held only for one operation, and a process that finds the
file locked waits and retries. A new catalog file appears whole (``_create``), so that no process ever opens
one that another is still writing. Within a process, threads take turns on a file (``_thread_lock``).
"""

from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import duckdb


def _create(db_path: Path) -> None:
    """Write an empty database beside ``db_path`` and link it into place, which fails if another process got
    there first. Processes that opened a new catalog at once used to read a file still being written ("Could
    not read enough bytes") or wrote over each other's header."""
    scratch = db_path.with_name(f".{db_path.name}.{os.getpid()}.new")
    duckdb.connect(str(scratch)).close()
    try:
        os.link(scratch, db_path)
    except FileExistsError:
        pass
    finally:
        scratch.unlink()


_THREAD_LOCKS: dict[Path, threading.RLock] = {}
_THREAD_LOCKS_GUARD = threading.Lock()


def _thread_lock(db_path: Path) -> threading.RLock:
    """One connection at a time per file within a process, as DuckDB's file lock allows across processes.
    Threads that opened the same file at once (the API's request threads) raced in DuckDB's attach ("Unique
    file handle conflict"), conflicted on ``CREATE TABLE IF NOT EXISTS``, and a read right after a conflicting
    insert did not see the row that beat it. Re-entrant: a store may open a second connection inside a first."""
    key = db_path.resolve()
    with _THREAD_LOCKS_GUARD:
        return _THREAD_LOCKS.setdefault(key, threading.RLock())


@contextmanager
def connect(db_path: Path, schema: str, lock_timeout_s: float = 60.0):
    db_path.parent.mkdir(parents=True, exist_ok=True)
    if not db_path.exists():
        _create(db_path)
    with _thread_lock(db_path):
        deadline = time.monotonic() + lock_timeout_s
        while True:
            try:
                con = duckdb.connect(str(db_path))
                break
            except duckdb.IOException as exc:
                if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        try:
            con.execute(schema)
            yield con
        finally:
            con.close()


class CatalogTable:
    """Base of the catalog's stores: each names its ``SCHEMA`` and gets short-lived connections."""

    SCHEMA = ""

    def __init__(self, db_path: str | Path, lock_timeout_s: float = 60.0):
        self.db_path = Path(db_path)
        self.lock_timeout_s = lock_timeout_s

    def _connect(self):
        return connect(self.db_path, self.SCHEMA, self.lock_timeout_s)
