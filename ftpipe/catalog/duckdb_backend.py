"""The embedded catalog: one DuckDB file, short-lived connections, one writer process at a time.

Several run workers, sensors and the CLI (separate processes) write to the same file, and DuckDB allows
one writer process at a time: a connection is held only for one operation, and a process that finds the
file locked waits and retries. Holding the file is what makes an operation atomic here, so ``lock`` has
nothing to add. A new catalog file appears whole (``_create``), so that no process ever opens one that
another is still writing. Within a process, threads take turns on a file (``_thread_lock``).
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import duckdb

from ftpipe.catalog import migrations


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
_HELD: dict[Path, tuple[int, int]] = {}
"""File -> (the descriptor of its process lock, how many nested connections of the holding thread use it)."""


def _thread_lock(db_path: Path) -> threading.RLock:
    """One connection at a time per file within a process, as DuckDB's file lock allows across processes.
    Threads that opened the same file at once (the API's request threads) raced in DuckDB's attach ("Unique
    file handle conflict"), conflicted on ``CREATE TABLE IF NOT EXISTS``, and a read right after a conflicting
    insert did not see the row that beat it. Re-entrant: a store may open a second connection inside a first."""
    key = db_path.resolve()
    with _THREAD_LOCKS_GUARD:
        return _THREAD_LOCKS.setdefault(key, threading.RLock())


class DuckDBConnection:
    def __init__(self, con: duckdb.DuckDBPyConnection):
        self._con = con

    def execute(self, sql: str, params=()):
        return self._con.execute(sql, list(params))

    def lock(self, name: str) -> None:
        """Held already: no other process has the file while this connection is open."""


@contextmanager
def _process_lock(db_path: Path, lock_timeout_s: float) -> Iterator[None]:
    """The file's lock between processes, held from before DuckDB opens the file until after it has closed it.
    DuckDB's own lock did not cover all of its close: a process that opened the file while another was closing
    it now and then read the database without the other's last commit, and its own close then wrote over it
    (one insert in about a hundred lost, with ten processes on two busy cores). Taken once per thread that holds
    ``_thread_lock``: a nested connection of that thread reuses it."""
    key = db_path.resolve()
    held = _HELD.get(key)
    if held is not None:  # this thread holds it (the thread lock, held around this, is re-entrant per thread)
        _HELD[key] = (held[0], held[1] + 1)
        try:
            yield
        finally:
            fd, depth = _HELD[key]
            _HELD[key] = (fd, depth - 1)
        return
    fd = os.open(db_path.with_name(f".{db_path.name}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + lock_timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{db_path} stayed locked by another process for {lock_timeout_s:g} s") \
                        from None
                time.sleep(0.01)
        _HELD[key] = (fd, 1)
        try:
            yield
        finally:
            del _HELD[key]
    finally:
        os.close(fd)  # releases the lock


@contextmanager
def _open_file(db_path: Path, lock_timeout_s: float) -> Iterator[duckdb.DuckDBPyConnection]:
    db_path.parent.mkdir(parents=True, exist_ok=True)
    if not db_path.exists():
        _create(db_path)
    with _thread_lock(db_path), _process_lock(db_path, lock_timeout_s):
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
            yield con
        finally:
            con.close()


class DuckDBBackend:
    dialect = "duckdb"

    def __init__(self, path: str | Path, lock_timeout_s: float = 60.0):
        self.path = Path(path)
        self.lock_timeout_s = lock_timeout_s

    @property
    def location(self) -> str:
        return str(self.path)

    def exists(self) -> bool:
        """Reads of a catalog never written answer empty without creating its file."""
        return self.path.exists()

    @contextmanager
    def connect(self) -> Iterator[DuckDBConnection]:
        """One transaction on a catalog at the latest schema (checked on every connection: the file may have
        been replaced since, as a demo reset does)."""
        with _open_file(self.path, self.lock_timeout_s) as raw:
            con = DuckDBConnection(raw)
            current = _schema_version(raw)
            raw.begin()
            try:
                if current != migrations.LATEST:
                    migrations.apply_pending(con)
                yield con
                raw.commit()
            except BaseException:
                raw.rollback()
                raise

    def migrate(self) -> tuple[int, list[migrations.Migration]]:
        """Bring the schema up to date: (version before, migrations applied)."""
        with _open_file(self.path, self.lock_timeout_s) as raw:
            con = DuckDBConnection(raw)
            raw.begin()
            try:
                before = migrations.applied_version(con)
                applied = migrations.apply_pending(con)
                raw.commit()
            except BaseException:
                raw.rollback()
                raise
        return before, applied


def _schema_version(raw: duckdb.DuckDBPyConnection) -> int:
    """``migrations.applied_version`` in one cheap query (information_schema costs DuckDB several ms, paid
    on every connection here). Outside a transaction: in one, a failed statement would abort it."""
    try:
        row = raw.execute("SELECT max(version) FROM catalog_migrations").fetchone()
        assert row is not None  # an aggregate without GROUP BY always returns one row
        return row[0] or 0
    except duckdb.CatalogException:
        return 0


@contextmanager
def connect(db_path: Path, schema: str, lock_timeout_s: float = 60.0) -> Iterator[duckdb.DuckDBPyConnection]:
    """A raw connection to a DuckDB file with ``schema`` applied: for tests of the file handling itself."""
    with _open_file(db_path, lock_timeout_s) as con:
        con.execute(schema)
        yield con
