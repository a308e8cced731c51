"""The catalog's schema, as numbered migrations applied in order on either backend.

Each migration is SQL that DuckDB and PostgreSQL both accept (``DOUBLE PRECISION``, ``JSON``,
``TIMESTAMPTZ``, ``ON CONFLICT``), so the two schemas cannot drift apart. A migration is never edited once
released: a change is a new migration at the end. ``catalog_migrations`` records what a catalog holds, and
``ftpipe catalog migrate`` (or the first connection of a process, ``ftpipe.catalog.db``) applies what is
missing, in one transaction, under a lock that lets one migrator at a time in.

Migration 1 is written with ``IF NOT EXISTS`` throughout so that a catalog file created before migrations
were recorded is adopted as it stands.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    statements: tuple[str, ...]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "registry, usage ledger, device leases and the API's keys, files, jobs and idempotency keys", (
        """
        CREATE TABLE IF NOT EXISTS adapters (
            adapter_id      VARCHAR PRIMARY KEY,
            tenant          VARCHAR NOT NULL,
            job             VARCHAR NOT NULL,
            run_id          VARCHAR NOT NULL,
            base_model      VARCHAR NOT NULL,
            base_digest     VARCHAR NOT NULL,
            dataset_digest  VARCHAR NOT NULL,
            config_hash     VARCHAR NOT NULL,
            method          VARCHAR NOT NULL,
            lora_rank       INTEGER,
            path            VARCHAR NOT NULL,
            metrics         JSON,
            status          VARCHAR NOT NULL,
            created_at      TIMESTAMPTZ NOT NULL
        )""",
        "ALTER TABLE adapters ADD COLUMN IF NOT EXISTS status_changed_at TIMESTAMPTZ",
        """
        CREATE TABLE IF NOT EXISTS gpu_usage (
            run_id              VARCHAR PRIMARY KEY,
            tenant              VARCHAR NOT NULL,
            job                 VARCHAR NOT NULL,
            attempt             INTEGER NOT NULL,
            pool                VARCHAR NOT NULL,
            gpus                INTEGER NOT NULL,
            price_per_gpu_hour  DOUBLE PRECISION NOT NULL,
            started_at          TIMESTAMPTZ NOT NULL,
            ended_at            TIMESTAMPTZ NOT NULL,
            gpu_seconds         DOUBLE PRECISION NOT NULL,
            outcome             VARCHAR NOT NULL,
            category            VARCHAR NOT NULL,
            billable            BOOLEAN NOT NULL,
            reason              VARCHAR,
            month               VARCHAR NOT NULL
        )""",
        """
        CREATE TABLE IF NOT EXISTS device_leases (
            pool         VARCHAR NOT NULL,
            device       INTEGER NOT NULL,
            run_id       VARCHAR NOT NULL,
            host         VARCHAR NOT NULL,
            pid          INTEGER NOT NULL,
            acquired_at  TIMESTAMPTZ NOT NULL,
            PRIMARY KEY (pool, device)
        )""",
        """
        CREATE TABLE IF NOT EXISTS api_keys (
            key_id      VARCHAR PRIMARY KEY,
            tenant      VARCHAR NOT NULL,
            name        VARCHAR NOT NULL,
            digest      VARCHAR NOT NULL,
            created_at  TIMESTAMPTZ NOT NULL,
            revoked_at  TIMESTAMPTZ
        )""",
        """
        CREATE TABLE IF NOT EXISTS tenant_files (
            file_id     VARCHAR PRIMARY KEY,
            tenant      VARCHAR NOT NULL,
            filename    VARCHAR NOT NULL,
            purpose     VARCHAR NOT NULL,
            bytes       BIGINT NOT NULL,
            sha256      VARCHAR NOT NULL,
            objective   VARCHAR,
            created_at  TIMESTAMPTZ NOT NULL,
            deleted_at  TIMESTAMPTZ
        )""",
        """
        CREATE TABLE IF NOT EXISTS job_requests (
            job_id          VARCHAR NOT NULL,
            tenant          VARCHAR NOT NULL,
            created_at      TIMESTAMPTZ NOT NULL,
            model           VARCHAR NOT NULL,
            training_file   VARCHAR NOT NULL,
            validation_file VARCHAR,
            request         JSON NOT NULL,
            content_key     VARCHAR NOT NULL,
            PRIMARY KEY (tenant, job_id)
        )""",
        """
        CREATE TABLE IF NOT EXISTS idempotency_keys (
            tenant          VARCHAR NOT NULL,
            key             VARCHAR NOT NULL,
            request_digest  VARCHAR NOT NULL,
            claim           VARCHAR NOT NULL,
            status_code     INTEGER,
            response        JSON,
            created_at      TIMESTAMPTZ NOT NULL,
            PRIMARY KEY (tenant, key)
        )""",
    )),
    Migration(2, "index the tables read per tenant and the ledger's month", (
        "CREATE INDEX IF NOT EXISTS adapters_by_tenant ON adapters (tenant, created_at)",
        "CREATE INDEX IF NOT EXISTS gpu_usage_by_month ON gpu_usage (month, tenant)",
        "CREATE INDEX IF NOT EXISTS tenant_files_by_tenant ON tenant_files (tenant, created_at)",
    )),
)
LATEST = MIGRATIONS[-1].version

_LEDGER = """
CREATE TABLE IF NOT EXISTS catalog_migrations (
    version     INTEGER PRIMARY KEY,
    name        VARCHAR NOT NULL,
    applied_at  TIMESTAMPTZ NOT NULL
)"""


def applied_version(con) -> int:
    """The catalog's schema version (0 for a new one). ``con`` is a catalog connection (``ftpipe.catalog.db``)."""
    exists = con.execute("SELECT count(*) FROM information_schema.tables "
                         "WHERE table_name = 'catalog_migrations' AND table_schema = current_schema()").fetchone()[0]
    if not exists:
        return 0
    return con.execute("SELECT coalesce(max(version), 0) FROM catalog_migrations").fetchone()[0]


def apply_pending(con) -> list[Migration]:
    """Apply what the catalog lacks, in order, inside the caller's transaction (which holds the migration lock).
    A catalog newer than this code is refused: its tables may have columns this code would write wrongly."""
    con.execute(_LEDGER)
    current = applied_version(con)
    if current > LATEST:
        raise RuntimeError(f"the catalog's schema is version {current}; this ftpipe knows up to {LATEST}: "
                           "upgrade ftpipe before using this catalog")
    pending = [m for m in MIGRATIONS if m.version > current]
    for migration in pending:
        for statement in migration.statements:
            con.execute(statement)
        con.execute("INSERT INTO catalog_migrations VALUES (?, ?, now())", [migration.version, migration.name])
    return pending
