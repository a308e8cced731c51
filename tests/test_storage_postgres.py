"""The production instance config: Postgres storage from the environment, same queue limits as the default."""

import shutil
import threading
import uuid
from pathlib import Path

import pytest
import yaml
from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

REPO_ROOT = Path(__file__).resolve().parents[1]
PG_YAML = REPO_ROOT / "docs" / "deploy" / "dagster.postgres.yaml"
ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


@pytest.fixture
def pg_url():
    psycopg2 = pytest.importorskip("psycopg2")
    try:
        admin = psycopg2.connect(ADMIN_URL)
    except psycopg2.OperationalError as exc:
        pytest.skip(f"no PostgreSQL on 127.0.0.1:5432: {exc}")
    admin.autocommit = True
    name = f"ftpipe_test_{uuid.uuid4().hex[:8]}"
    admin.cursor().execute(f"CREATE DATABASE {name}")
    # SQLAlchemy 2.1 maps a bare postgresql:// to psycopg 3; dagster-postgres ships psycopg2.
    yield f"postgresql+psycopg2://postgres@127.0.0.1:5432/{name}"
    admin.cursor().execute(f"DROP DATABASE {name} WITH (FORCE)")
    admin.close()


def test_queue_limits_are_the_same_as_the_default_config():
    default, production = yaml.safe_load((REPO_ROOT / "dagster.yaml").read_text()), yaml.safe_load(PG_YAML.read_text())
    assert production["run_coordinator"] == default["run_coordinator"]
    assert production["storage"]["postgres"]["postgres_url"] == {"env": "DAGSTER_PG_URL"}


def test_postgres_instance_takes_concurrent_writers(pg_url, tmp_path, monkeypatch):
    """Eight writers at once (what several run workers and the daemon do), which SQLite is known to refuse."""
    from dagster._core.test_utils import create_run_for_test

    shutil.copy(PG_YAML, tmp_path / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_PG_URL", pg_url)
    with DagsterInstance.from_config(str(tmp_path)) as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        assert type(instance.run_coordinator).__name__ == "QueuedRunCoordinator"
        errors = []

        def writer(i: int):
            try:
                run = create_run_for_test(instance, job_name="finetune", tags={"ftpipe/tenant": f"t{i}"})
                instance.add_dynamic_partitions("tenant_jobs", [f"t{i}__j{i}"])
                for n in range(10):
                    instance.report_engine_event(f"writer {i} event {n}", run)
            except Exception as exc:  # collected and asserted below
                errors.append(exc)

        threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        runs = instance.get_runs(RunsFilter(statuses=[DagsterRunStatus.NOT_STARTED]))
        assert sorted(r.tags["ftpipe/tenant"] for r in runs) == sorted(f"t{i}" for i in range(8))
        assert all(len(instance.all_logs(r.run_id)) == 10 for r in runs)
        assert sorted(instance.get_dynamic_partitions("tenant_jobs")) == sorted(f"t{i}__j{i}" for i in range(8))
