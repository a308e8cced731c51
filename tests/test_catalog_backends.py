"""The catalog on both backends (a DuckDB file and PostgreSQL): schema migrations, transactions, and twenty
processes writing at once without a lost or doubled row. Tests of each store's own rules also run on both
(the ``catalog_at`` fixture)."""

import multiprocessing

import pytest

from ftpipe.catalog import migrations
from ftpipe.catalog.adapters import AdapterRegistry
from ftpipe.catalog.db import open_backend
from ftpipe.catalog.postgres_backend import redact, split_url
from ftpipe.leases import DeviceLeases
from ftpipe.metering.ledger import UsageLedger, UsageRecord
from ftpipe_cli.main import main as ftpipe
from tests.helpers.catalog_race import adapter, race, usage

PROCESSES = 20


def test_a_new_catalog_is_created_at_the_latest_schema_and_migrating_again_changes_nothing(catalog_at):
    backend = open_backend(catalog_at)
    assert backend.migrate() == (0, list(migrations.MIGRATIONS))
    assert backend.migrate() == (migrations.LATEST, [])
    with backend.connect() as con:
        rows = con.execute("SELECT version, name FROM catalog_migrations ORDER BY version").fetchall()
    assert rows == [(m.version, m.name) for m in migrations.MIGRATIONS]


def test_the_first_use_of_a_catalog_creates_its_schema(catalog_at):
    assert UsageLedger(catalog_at).record(usage("run-1"))
    assert open_backend(catalog_at).migrate() == (migrations.LATEST, [])


def test_a_catalog_newer_than_the_code_is_refused(catalog_at):
    backend = open_backend(catalog_at)
    backend.migrate()
    with backend.connect() as con:
        con.execute("INSERT INTO catalog_migrations VALUES (?, 'from the future', now())", [migrations.LATEST + 1])
    with pytest.raises(RuntimeError, match=f"schema is version {migrations.LATEST + 1}; this ftpipe knows up to "
                                           f"{migrations.LATEST}: upgrade ftpipe"):
        backend.migrate()


def test_a_catalog_file_from_before_migrations_is_adopted_with_its_rows(tmp_path):
    import duckdb

    path = tmp_path / "catalog.duckdb"
    with duckdb.connect(str(path)) as con:  # what earlier versions created: the tables, no migration record
        for statement in migrations.MIGRATIONS[0].statements:
            con.execute(statement)
    UsageLedger(path).record(usage("old-run"))  # a first write adopts it
    assert [r.run_id for r in UsageLedger(path).records()] == ["old-run"]
    assert open_backend(path).migrate() == (migrations.LATEST, [])


def test_an_operation_that_fails_leaves_nothing_behind(catalog_at):
    backend = open_backend(catalog_at)
    with pytest.raises(ZeroDivisionError):
        with backend.connect() as con:
            con.execute("INSERT INTO device_leases VALUES ('p', 0, 'run', 'host', 1, now())")
            1 / 0
    assert DeviceLeases(catalog_at).held() == []


def test_values_travel_as_parameters_whatever_they_hold(catalog_at):
    """Placeholders are rewritten for psycopg in the SQL text only: quotes, '?', '%' and SQL in a value are data."""
    hostile = "acme'; DROP TABLE gpu_usage; -- 100% ? %s %(x)s \\x00"
    record = usage("run-'?%")
    ledger = UsageLedger(catalog_at)
    assert ledger.record(UsageRecord(**{**record.__dict__, "tenant": hostile, "reason": hostile}))
    (row,) = ledger.records(tenant=hostile)
    assert (row.run_id, row.tenant, row.reason) == ("run-'?%", hostile, hostile)
    assert ledger.charged_hours(record.month) == {hostile: 1.0}


def test_twenty_processes_at_once_lose_and_double_nothing(catalog_at):
    context = multiprocessing.get_context("spawn")
    ready, results, go = context.Queue(), context.Queue(), context.Event()
    workers = [context.Process(target=race, args=(catalog_at, n, ready, go, results)) for n in range(PROCESSES)]
    for w in workers:
        w.start()
    for _ in workers:  # every process has imported and opened its stores: then they all start at once
        ready.get(timeout=300)
    go.set()
    outcomes = dict(results.get(timeout=600) for _ in workers)
    for w in workers:
        w.join(timeout=60)
    assert not [o for o in outcomes.values() if isinstance(o, str)], outcomes

    # Leases: the pool's 8 devices went to 8 runs, one each; the 12 others were refused.
    granted = [o["devices"] for o in outcomes.values() if o["devices"] is not None]
    assert sorted(d for devices in granted for d in devices) == list(range(8))
    held = DeviceLeases(catalog_at).held("race")
    assert sorted((lease.device, lease.run_id) for lease in held) == sorted(
        (o["devices"][0], f"run-{n}") for n, o in outcomes.items() if o["devices"] is not None)

    # Ledger: each run's row once, whoever wrote it twice; the shared run's row written by exactly one process.
    assert all(o["ledger"][:2] == [True, False] for o in outcomes.values())
    assert sum(o["ledger"][2] for o in outcomes.values()) == 1
    rows = UsageLedger(catalog_at).records()
    assert sorted(r.run_id for r in rows) == sorted([f"run-{n}" for n in range(PROCESSES)] + ["run-shared"])

    # Registry: every process's own adapter, the shared one registered once and promoted once.
    assert sum(o["registered_shared"] for o in outcomes.values()) == 1
    assert sum(o["promoted_shared"] for o in outcomes.values()) == 1
    registry = AdapterRegistry(catalog_at)
    assert sorted(a.adapter_id for a in registry.list()) == sorted([f"own-{n}" for n in range(PROCESSES)]
                                                                   + ["shared"])
    assert registry.get("shared").status == "promoted"


def test_a_postgres_url_names_its_schema_and_never_shows_its_password():
    assert split_url("postgresql://u:secret@db:5432/dagster?schema=ftpipe_prod&sslmode=require") == (
        "postgresql://u:secret@db:5432/dagster?sslmode=require", "ftpipe_prod")
    assert split_url("postgresql://db/dagster")[1] == "ftpipe"
    assert redact("postgresql://u:secret@db/dagster") == "postgresql://u:***@db/dagster"
    for schema in ("Upper", "x;drop", "a" * 64, ""):
        with pytest.raises(ValueError, match="catalog schema"):
            split_url(f"postgresql://db/dagster?schema={schema}")
    with pytest.raises(ValueError, match="not a PostgreSQL URL: mysql://u:\\*\\*\\*@db"):
        split_url("mysql://u:secret@db/x")


def test_ftpipe_catalog_migrate_brings_a_catalog_up_to_date(catalog_at, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("FTPIPE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("FTPIPE_CATALOG", catalog_at)
    assert ftpipe(["catalog", "migrate"]) == 0
    first = capsys.readouterr().out
    assert f"schema version 0 -> {migrations.LATEST}" in first
    assert all(m.name in first for m in migrations.MIGRATIONS)
    assert ftpipe(["catalog", "migrate"]) == 0
    assert f"up to date (schema version {migrations.LATEST})" in capsys.readouterr().out
    # The registry it migrated is the one the platform then uses.
    AdapterRegistry(catalog_at).register(adapter("after-migrate"))
    assert [a.adapter_id for a in AdapterRegistry(catalog_at).list()] == ["after-migrate"]
