"""Where the catalog lives, and the base of its stores.

The catalog (adapter registry, usage ledger, device leases, the API's keys, files, jobs and idempotency
keys) sits behind one small interface with two backends: a DuckDB file, the embedded default
(``ftpipe.catalog.duckdb_backend``), and PostgreSQL for deployments where many processes on many machines
write at once (``ftpipe.catalog.postgres_backend``). ``FTPIPE_CATALOG`` picks one: a file path, or a
``postgresql://`` URL.

A store writes one SQL text for both: DuckDB's ``?`` placeholders, types both accept, ``ON CONFLICT`` rather
than ``INSERT OR REPLACE``, and ``RETURNING`` to learn whether a write-once row was written. Each
``_connect()`` block is one transaction; ``con.lock(name)`` serialises the read-then-write sections across
processes.
"""

from __future__ import annotations

from pathlib import Path

from ftpipe.catalog.duckdb_backend import DuckDBBackend


def is_postgres(location: str | Path) -> bool:
    return str(location).startswith(("postgresql://", "postgres://", "postgresql+"))


def open_backend(location: str | Path, lock_timeout_s: float = 60.0):
    """The catalog at ``location``: a PostgreSQL URL or a DuckDB file path."""
    if is_postgres(location):
        from ftpipe.catalog.postgres_backend import PostgresBackend  # psycopg only where it is used

        return PostgresBackend(str(location))
    return DuckDBBackend(location, lock_timeout_s)


class CatalogTable:
    """Base of the catalog's stores: short-lived connections, one transaction each."""

    def __init__(self, location: str | Path, lock_timeout_s: float = 60.0):
        self.location = location
        self.backend = open_backend(location, lock_timeout_s)

    def _exists(self) -> bool:
        return self.backend.exists()

    def _connect(self):
        return self.backend.connect()
