"""Files in the landing zone -> the upload sensor -> queued runs dequeued by the real Dagster daemon.

This is the demo at a smaller scale: the daemon runs in its own process with the repo's dagster.yaml
(QueuedRunCoordinator with tag limits), evaluates the upload sensor, dequeues by priority and launches runs
with the default run launcher; each run trains in a Pipes subprocess and evaluates with lm-eval.
"""

import shutil
from pathlib import Path

import pytest
from dagster import DagsterInstance, RunsFilter

from ftpipe.catalog.adapters import AdapterRegistry
from ftpipe.landing import results_key
from ftpipe.objectstore import LocalObjectStore
from ftpipe_cli.demo import DemoScale, run_demo
from sensors.run_tags import TENANT_TAG

REPO_ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def test_uploads_become_registered_adapters_through_the_daemon(tmp_path, monkeypatch, tiny_model):
    home = tmp_path / "home"
    dagster_home = home / "dagster_home"
    dagster_home.mkdir(parents=True)
    shutil.copy(REPO_ROOT / "dagster.yaml", dagster_home / "dagster.yaml")
    monkeypatch.setenv("FTPIPE_HOME", str(home))
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home))
    monkeypatch.setenv("FTPIPE_TENANTS", str(REPO_ROOT / "tenants.yaml"))

    store = LocalObjectStore(home / "landing")
    registry = AdapterRegistry(home / "catalog.duckdb")
    lines = []
    rows = {r.tenant: r for r in run_demo(store, registry, DemoScale(rows=120, epochs=4), timeout_s=600,
                                          progress=lines.append)}

    assert rows["acme"].status == "SUCCESS" and rows["globex"].status == "SUCCESS", "\n".join(lines)
    assert rows["initech"].status == "FAILURE"
    assert rows["initech"].reason.startswith("[user] check schema failed: tickets.jsonl line 11, record: invalid JSON")
    assert not (home / "artifacts" / "tenants" / "initech" / "jobs" / rows["initech"].job / "training").exists()

    adapters = {a.tenant: a for a in registry.list()}
    assert set(adapters) == {"acme", "globex"}
    for tenant in ("acme", "globex"):
        assert (Path(adapters[tenant].path) / "adapter_model.safetensors").exists()
        assert store.exists(results_key(tenant, rows[tenant].job, "eval_report.md"))
    assert adapters["acme"].metrics["holdout_exact_match_tuned"] > adapters["acme"].metrics["holdout_exact_match_base"]

    with DagsterInstance.get() as instance:
        runs = instance.get_runs(RunsFilter(tags={TENANT_TAG: "acme"}))
        assert len(runs) == 1  # the sensor ticked many times; the manifest started one run
        assert runs[0].tags["dagster/priority"] == "10" and runs[0].tags["ftpipe/pool"] == "cpu-local"
