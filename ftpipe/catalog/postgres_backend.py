"""The catalog on PostgreSQL: the server Dagster's storage uses, in a schema of its own (``ftpipe`` unless the
URL's ``schema`` parameter names another).

Every run pod, sensor, API replica and CLI connects at once; each operation is one transaction, and the
places where reading and writing must not interleave with another process (claiming devices) take a
transaction-scoped advisory lock (``lock``). Everything else is a single statement that PostgreSQL makes
atomic: ``INSERT ... ON CONFLICT DO NOTHING RETURNING`` for write-once rows, ``UPDATE ... WHERE status = ?``
for forward-only changes.

Queries are written with DuckDB's ``?`` placeholders (one SQL text for both backends) and handed to psycopg
as ``%s``: values always travel as bound parameters, never inside the SQL. Passwords belong in
``PGPASSWORD`` or a ``.pgpass`` file, which libpq reads, not in the URL, which the Dagster UI shows.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from typing import Iterator
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import sql
from psycopg.types.string import TextLoader

from ftpipe.catalog import migrations

DEFAULT_SCHEMA = "ftpipe"
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_MIGRATION_LOCK = "ftpipe.catalog.migrate"
# Catalogs this process has seen at the latest schema: checking costs a connection.
_CURRENT: set[tuple[str, str]] = set()


def split_url(url: str) -> tuple[str, str]:
    """(libpq URL, schema): the ``schema`` query parameter is ours; libpq would refuse it."""
    parts = urlsplit(url)
    if parts.scheme.split("+")[0] not in ("postgresql", "postgres"):
        raise ValueError(f"not a PostgreSQL URL: {redact(url)}")
    query = parse_qsl(parts.query, keep_blank_values=True)
    schema = next((v for k, v in query if k == "schema"), DEFAULT_SCHEMA)
    if not _SCHEMA_NAME.fullmatch(schema):
        raise ValueError(f"catalog schema {schema!r}: lower-case letters, digits and '_', at most 63")
    rest = urlencode([(k, v) for k, v in query if k != "schema"])
    return urlunsplit(("postgresql", parts.netloc, parts.path, rest, parts.fragment)), schema


def redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


class PostgresConnection:
    def __init__(self, con: psycopg.Connection):
        self._con = con

    def execute(self, query: str, params=()):
        # '%' is psycopg's placeholder marker: a literal one in our SQL is escaped first.
        return self._con.execute(query.replace("%", "%%").replace("?", "%s"), list(params))

    def lock(self, name: str) -> None:
        """Hold ``name`` until this transaction ends; another process asking for it waits."""
        self._con.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [name])


class PostgresBackend:
    dialect = "postgresql"

    def __init__(self, url: str, connect_timeout_s: int = 10):
        self.url = url
        self._conninfo, self.schema = split_url(url)
        self.connect_timeout_s = connect_timeout_s

    @property
    def location(self) -> str:
        return redact(self.url)

    def exists(self) -> bool:
        return True

    def _open(self) -> psycopg.Connection:
        con = psycopg.connect(self._conninfo, connect_timeout=self.connect_timeout_s, application_name="ftpipe",
                              options=f"-c search_path={self.schema} -c TimeZone=UTC")
        # Both backends hand JSON columns back as text, which the stores parse.
        for json_type in ("json", "jsonb"):
            con.adapters.register_loader(json_type, TextLoader)
        return con

    @contextmanager
    def connect(self) -> Iterator[PostgresConnection]:
        """One transaction, committed when the block ends and rolled back if it raises. The schema is brought
        up to date by a process's first connection to it."""
        if (self._conninfo, self.schema) not in _CURRENT:
            self.migrate()
        with self._open() as raw:  # psycopg commits on a clean exit, rolls back on an exception
            yield PostgresConnection(raw)

    def migrate(self) -> tuple[int, list[migrations.Migration]]:
        with self._open() as raw:
            con = PostgresConnection(raw)
            con.lock(f"{_MIGRATION_LOCK}:{self.schema}")
            raw.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema)))
            before = migrations.applied_version(con)
            applied = migrations.apply_pending(con)
        _CURRENT.add((self._conninfo, self.schema))
        return before, applied

    def drop(self) -> None:
        """Remove the schema and everything in it (the tests' clean-up)."""
        with self._open() as raw:
            raw.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(self.schema)))
        _CURRENT.discard((self._conninfo, self.schema))
