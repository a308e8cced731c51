"""Recovery on a real instance: the Dagster daemon, its code server, run workers and trainers, and the webserver.

Three tenants' jobs at once:

- acme's run loses its whole process group mid-training (the daemon, its code server, the run worker and the
  trainer, SIGKILLed: a host or container restart). A new daemon's run monitoring finds the worker gone and
  fails the run, which frees its slot; the failure sensor meters the lost attempt (refunded) and resumes it,
  and the new run continues from the last checkpoint.
- initech's first launch of its GPU run fails, as when the code server shuts down under load; the failure
  sensor retries it and the second attempt completes.
- globex uploads data that fails validation: the run fails at validated_dataset, as the tenant's error, with
  the reason on the run, and is not retried.

What an operator sees is checked through the webserver's GraphQL API: the failure reasons on the runs, and
each job's check results under its own partition only.
"""

import os
import signal
import time
from pathlib import Path

import psutil
import pytest
from dagster import AssetKey, DagsterEventType, DagsterInstance, DagsterRunStatus, RunsFilter
from dagster._core.storage.partition_status_cache import AssetPartitionStatus

from ftpipe import synthetic
from ftpipe.metering.ledger import UsageLedger
from ftpipe.objectstore import LocalObjectStore
from ftpipe.submission import default_manifest, submit_job
from ftpipe_cli.demo import start_daemon, stop_daemon
from partitions.run_tags import ATTEMPT_TAG, TENANT_TAG
from partitions.tenant_jobs import tenant_jobs_partitions
from tests.helpers.daemon_home import repo_configs, trainers, use_daemon_home
from tests.helpers.webserver import check_executions, running_webserver, runs_of

REPO_ROOT = Path(__file__).resolve().parents[1]
MONITORING_POLL_SECONDS = 3
# The first checkpoint comes at step 50 (save_steps); the 200 steps after it (about 12 s on 2 cores) leave time
# to see it and kill the host before the run ends on a CPU several times faster; the resumed run trains them again.
LONG_STEPS = 250

pytestmark = pytest.mark.slow


def _platform(home: Path, monkeypatch) -> None:
    """The repo's configs, with a launcher that fails initech's first launch and fast monitoring."""
    instance_config, platform = repo_configs()
    instance_config["run_launcher"] = {"module": "tests.helpers.flaky_launcher", "class": "FailsFirstLaunch"}
    instance_config["run_monitoring"]["poll_interval_seconds"] = MONITORING_POLL_SECONDS
    use_daemon_home(home, monkeypatch, instance_config, platform)
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))  # the daemon imports the test launcher
    # Create the instance's storage once, before the daemon and the webserver race to create it.
    with DagsterInstance.get() as instance:
        instance.get_runs(limit=1)
        instance.all_logs("none")
        instance.all_instigator_state()


def _wait(what: str, condition, timeout_s: float, log: Path, interval: float = 0.5):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}; daemon log:\n{log.read_text()[-4000:]}")


def _runs(instance: DagsterInstance, tenant: str, job_name: str | None = None):
    """The tenant's runs (of one of its job's stages), by attempt."""
    return sorted(instance.get_runs(RunsFilter(tags={TENANT_TAG: tenant}, job_name=job_name)),
                  key=lambda r: int(r.tags[ATTEMPT_TAG]))


def _gpu_runs(ui_runs: list[dict]) -> list[dict]:
    return [r for r in ui_runs if r["tags"].get("ftpipe/stage") == "finetune"]


def _checkpoint(home: Path, tenant: str) -> bool:
    """A committed checkpoint (one still being written lies in checkpoints/staging/)."""
    return any((home / "artifacts").glob(f"tenants/{tenant}/jobs/*/training/*/checkpoints/checkpoint-*/"
                                         "ftpipe-checkpoint.json"))


def test_a_lost_host_a_failed_launch_and_bad_data_each_end_as_they_should(tmp_path, monkeypatch, tiny_model):
    home = tmp_path / "home"
    _platform(home, monkeypatch)
    store = LocalObjectStore(home / "landing")
    rows = synthetic.to_jsonl(synthetic.acme_support(120)).encode()
    submit_job(store, "acme", "long", {"t.jsonl": rows}, default_manifest("t.jsonl", hyperparameters={
        "max_steps": LONG_STEPS}))

    log = home / "daemon.log"
    webserver_env = {k: os.environ[k] for k in ("DAGSTER_HOME", "FTPIPE_HOME", "FTPIPE_TENANTS", "PYTHONPATH")}
    daemon = start_daemon(log)
    try:
        with running_webserver(webserver_env, log=home / "webserver.log") as port, DagsterInstance.get() as instance:
            _wait("acme's first checkpoint", lambda: _checkpoint(home, "acme"), 600, log)
            (lost,) = _runs(instance, "acme", "finetune")
            assert lost.status == DagsterRunStatus.STARTED
            # The host goes: the daemon and every process under it (code server, run worker, trainer) at once.
            tree = [psutil.Process(daemon.pid), *psutil.Process(daemon.pid).children(recursive=True)]
            assert trainers(daemon)
            for process in tree:
                try:
                    process.send_signal(signal.SIGKILL)
                except psutil.NoSuchProcess:
                    pass
            daemon.wait()
            psutil.wait_procs(tree, timeout=30)
            killed_at = time.monotonic()
            daemon = start_daemon(log)
            # The other tenants' jobs arrive on the new instance (had they run beside acme's, they would have
            # been lost with the host too, and resumed the same way).
            submit_job(store, "initech", "flaky", {"t.jsonl": rows}, default_manifest("t.jsonl", hyperparameters={
                "max_steps": 20}))
            submit_job(store, "globex", "broken", {"t.jsonl": b'{"prompt": "q"}\n' * 30}, default_manifest("t.jsonl"))

            failed = _wait("run monitoring to fail the lost run",
                           lambda: (r := instance.get_run_by_id(lost.run_id)).is_finished and r, 120, log)
            detected_s = time.monotonic() - killed_at
            assert failed.status == DagsterRunStatus.FAILURE

            def all_done():
                runs = {t: _runs(instance, t, "finetune") for t in ("acme", "initech")}
                runs["globex"] = _runs(instance, "globex")
                done = (len(runs["acme"]) == 2 and len(runs["initech"]) == 2 and runs["globex"]
                        and all(r.is_finished for rs in runs.values() for r in rs))
                return runs if done else None

            runs = _wait("every job to end", all_done, 1000, log, interval=2)
            ui_runs = {t: runs_of(port, f"{t}__{j}") for t, j in (("acme", "long"), ("initech", "flaky"),
                                                                   ("globex", "broken"))}
            checks = {key: check_executions(port, "validated_dataset", "schema", key)
                      for key in ("acme__long", "globex__broken")}
            every_check = check_executions(port, "validated_dataset", "schema")
    finally:
        stop_daemon(daemon)

    # acme: failed by monitoring within a few polls of the new daemon's start, then resumed and finished.
    assert detected_s < 60, detected_s
    lost, resumed = runs["acme"]
    assert resumed.status == DagsterRunStatus.SUCCESS and resumed.tags[ATTEMPT_TAG] == "2"
    with DagsterInstance.get() as instance:
        records = {r.dagster_run.run_id: r for r in instance.get_run_records(RunsFilter(run_ids=[lost.run_id,
                                                                                                resumed.run_id]))}
        adapter = next(r.asset_materialization.metadata for r in instance.fetch_materializations(
            AssetKey("adapter"), limit=10).records if r.run_id == resumed.run_id)
        status = instance.get_status_by_partition(AssetKey("validated_dataset"), ["globex__broken", "acme__long"],
                                                  tenant_jobs_partitions)
        monitoring = [r.message for r in instance.all_logs(lost.run_id, of_type=DagsterEventType.RUN_FAILURE)]
    assert records[lost.run_id].end_time <= records[resumed.run_id].start_time
    assert 0 < adapter["resumed_from_step"].value < LONG_STEPS and adapter["steps"].value == LONG_STEPS
    assert any("run worker" in m for m in monitoring), monitoring
    ledger = {r.run_id: r for r in UsageLedger(home / "catalog.duckdb").records()}
    assert (ledger[lost.run_id].category, ledger[lost.run_id].billable) == ("lost", False)
    assert (ledger[resumed.run_id].category, ledger[resumed.run_id].billable) == ("completed", True)

    # initech: the failed launch was retried as attempt 2, which completed.
    first, second = runs["initech"]
    assert first.status == DagsterRunStatus.FAILURE and second.status == DagsterRunStatus.SUCCESS
    assert initech_ledger_is_clean(ledger, first.run_id)

    # globex: the tenant's error, once, at validation, in its first stage: it never queued for a GPU.
    (broken,) = runs["globex"]
    assert broken.status == DagsterRunStatus.FAILURE and broken.job_name == "prepare"
    assert status["globex__broken"] == AssetPartitionStatus.FAILED
    assert status["acme__long"] == AssetPartitionStatus.MATERIALIZED

    # The UI's Runs list: every failed run says why, in its outcome tag.
    outcome = {t: [r["tags"].get("ftpipe/outcome", "") for r in _gpu_runs(rs) or rs] for t, rs in ui_runs.items()}
    assert outcome["globex"][0].startswith("[user] validation found"), outcome
    assert outcome["initech"][0].startswith("[platform] resumed as attempt 2:") and "shut down" in outcome["initech"][0]
    assert outcome["acme"][0].startswith("[platform] resumed as attempt 2: the run worker (pid "), outcome
    assert [r["status"] for r in ui_runs["acme"]] == ["SUCCESS", "FAILURE", "SUCCESS"]  # prepare, lost, resumed

    # The Checks tab of one tenant job shows that job's check results only.
    assert [c["partition"] for c in checks["globex__broken"]] == ["globex__broken"]
    assert checks["globex__broken"][0]["status"] == "FAILED"
    assert {c["partition"] for c in checks["acme__long"]} == {"acme__long"}
    assert {c["status"] for c in checks["acme__long"]} == {"SUCCEEDED"}
    assert {c["partition"] for c in every_check} >= {"acme__long", "globex__broken", "initech__flaky"}


def initech_ledger_is_clean(ledger: dict, failed_launch: str) -> bool:
    """A launch that never started trained nothing: no usage is metered for it."""
    return failed_launch not in ledger
