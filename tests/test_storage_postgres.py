"""The production instance config: Postgres storage from the environment, same queue limits as the default."""

import shutil
import threading
import uuid
from pathlib import Path

import pytest
import yaml
from dagster import AssetKey, DagsterInstance, DagsterRunStatus, RunsFilter

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
    # The same limits; only the run cap, the tenant jobs' share of it (all pools' slots and the prepare stage's)
    # and the prepare stage's CPU workers (the demo's one machine has two) are production's own.
    without_cap = [{**c["run_coordinator"], "config": {k: v for k, v in c["run_coordinator"]["config"].items()
                                                       if k != "max_concurrent_runs"}} for c in (default, production)]
    for c in without_cap:
        c["config"]["tag_concurrency_limits"] = [lim for lim in c["config"]["tag_concurrency_limits"]
                                                 if lim["key"] not in ("ftpipe/kind", "ftpipe/stage")]
    assert without_cap[0] == without_cap[1]
    for section in ("run_launcher", "run_monitoring"):
        assert production[section] == default[section]
    assert production["storage"]["postgres"]["postgres_url"] == {"env": "DAGSTER_PG_URL"}


def test_postgres_instance_takes_concurrent_writers(pg_url, tmp_path, monkeypatch):
    """Eight writers at once (what several run workers and the daemon do), which SQLite is known to refuse."""
    from dagster._core.test_utils import create_run_for_test

    shutil.copy(PG_YAML, tmp_path / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_PG_URL", pg_url)
    with DagsterInstance.from_config(str(tmp_path)) as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        assert type(instance.run_coordinator).__name__ == "PlatformRunCoordinator"
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


_WORKER = """
import sys
from dagster import DagsterInstance, materialize
from ft_assets.datasets import raw_dataset, validated_dataset
from resources import resources_from_env
with DagsterInstance.get() as instance:
    result = materialize([raw_dataset, validated_dataset], partition_key=sys.argv[1], resources=resources_from_env(),
                         instance=instance, tags={"ftpipe/tenant": sys.argv[1].split("__")[0]})
sys.exit(0 if result.success else 1)
"""


@pytest.mark.slow
def test_several_runs_at_once_write_to_postgres(pg_url, tmp_path, platform_file, monkeypatch):
    """Four run processes at once, each validating a tenant's upload, all recorded in the Postgres instance."""
    import os
    import subprocess
    import sys

    from ftpipe import synthetic
    from ftpipe.objectstore import LocalObjectStore
    from ftpipe.submission import default_manifest, submit_job

    monkeypatch.setenv("DAGSTER_PG_URL", pg_url)
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(PG_YAML, home / "dagster.yaml")
    env = {**os.environ, "DAGSTER_HOME": str(home), "DAGSTER_PG_URL": pg_url, "FTPIPE_HOME": str(tmp_path / "ftpipe"),
           "FTPIPE_TENANTS": str(platform_file), "PYTHONPATH": str(REPO_ROOT)}
    store = LocalObjectStore(tmp_path / "ftpipe" / "landing")
    keys = []
    for n, tenant in enumerate(["acme", "initech", "acme", "initech"]):
        job = f"job{n}"
        submit_job(store, tenant, job, {"t.jsonl": synthetic.to_jsonl(synthetic.acme_support(150, seed=n)).encode()},
                   default_manifest("t.jsonl"))
        keys.append(f"{tenant}__{job}")
    with DagsterInstance.from_config(str(home)) as instance:
        instance.add_dynamic_partitions("tenant_jobs", keys)
    workers = [subprocess.Popen([sys.executable, "-c", _WORKER, key], env=env, cwd=REPO_ROOT,
                                stderr=subprocess.PIPE, text=True) for key in keys]
    for worker in workers:
        _, err = worker.communicate(timeout=300)
        assert worker.returncode == 0, err[-3000:]
    with DagsterInstance.from_config(str(home)) as instance:
        records = instance.get_run_records()
        assert sorted(r.dagster_run.tags["dagster/partition"] for r in records) == sorted(keys)
        assert all(r.dagster_run.status == DagsterRunStatus.SUCCESS for r in records)
        assert instance.get_materialized_partitions(AssetKey("validated_dataset")) == set(keys)
        spans = [(r.start_time, r.end_time) for r in records]
    # They really ran at the same time: some two runs overlap.
    assert any(a[0] < b[1] and b[0] < a[1] for i, a in enumerate(spans) for b in spans[i + 1:])
