"""Preemption end to end, through the real Dagster daemon and a real trainer.

A free-tier run holds the only slot of its pool; a premium job arrives. The daemon's own sensors stop the free
run the Dagster way (termination: the Pipes client signals the trainer, which checkpoints at its next step),
queue it again, the QueuedRunCoordinator gives the slot to the premium run and then back to the free one, which
resumes from its checkpoint. Its final adapter must equal, tensor for tensor, that of the same training run
uninterrupted.

The test holds the free run's trainer still (SIGSTOP) from the moment its stop handlers are set until the
sensor has asked it to stop, then lets it go on (SIGCONT) to the checkpoint it writes when asked, after its
first step: otherwise the preemption races the free run's end, and a run long enough to win that race on a
slow, busy host costs minutes to train twice, while on a fast host no length is safe. A stopped process keeps
its signals pending, so the stop request is the same one a running trainer gets.
"""

import contextlib
import json
from pathlib import Path

import psutil
import pytest
from dagster import AssetKey, DagsterInstance, DagsterRunStatus, RunsFilter

from ftpipe import synthetic
from ftpipe.catalog.adapters import AdapterRegistry
from ftpipe.launch.command import cpu_thread_env
from ftpipe.metering.ledger import UsageLedger
from ftpipe.objectstore import LocalObjectStore
from ftpipe.submission import default_manifest, submit_job
from ftpipe.training.pipes_main import STOP_HANDLERS_SET
from ftpipe.training.spec import TrainJobSpec
from ftpipe_cli.demo import start_daemon, stop_daemon
from partitions.run_tags import ATTEMPT_TAG, PREEMPTED_TAG, TENANT_TAG
from tests.helpers.daemon_home import repo_configs, trainers, use_daemon_home, wait_for
from tests.test_resume import _harness, _weights

REPO_ROOT = Path(__file__).resolve().parents[1]
# About 8 s of training on 2 cores; the free run stops after its first step and resumes for the rest.
FREE_STEPS = 120

pytestmark = pytest.mark.slow


def _one_slot_platform(home: Path, monkeypatch) -> None:
    """The repo's dagster.yaml and tenants.yaml with the CPU pool cut to one slot and preemption at once."""
    instance_config, platform = repo_configs()
    for limit in instance_config["run_coordinator"]["config"]["tag_concurrency_limits"]:
        if limit == {"key": "ftpipe/pool", "value": "cpu-local", "limit": limit["limit"]}:
            limit["limit"] = 1
    platform["pools"]["cpu-local"]["slots"] = 1
    # The CPU pool's calibration counts training only; a run also validates, tokenizes, starts processes and here
    # waits, held, for the premium job. A lower utilization makes the expected time cover all of it, so the
    # free run stays under max_progress_share of it (preemptible) and far from its time limit.
    platform["pools"]["cpu-local"]["mfu"] = 0.01
    platform["preemption"].update(wait_seconds=0, max_progress_share=1.0)
    use_daemon_home(home, monkeypatch, instance_config, platform)


def _stop_handlers_are_set(instance: DagsterInstance, run_id: str) -> bool:
    """The trainer has said so in the run's event log: a stop signal now checkpoints instead of killing it."""
    said = STOP_HANDLERS_SET.split("{")[0]
    return any((entry.user_message or "").startswith(said) for entry in instance.all_logs(run_id))


def _is_being_stopped(instance: DagsterInstance, run_id: str) -> bool:
    run = instance.get_run_by_id(run_id)
    return run is not None and PREEMPTED_TAG in run.tags and run.status != DagsterRunStatus.STARTED


def _runs(instance: DagsterInstance, tenant: str):
    """The tenant's GPU runs (the stage that holds a slot and can be preempted), by attempt."""
    return sorted(instance.get_runs(RunsFilter(tags={TENANT_TAG: tenant}, job_name="finetune")),
                  key=lambda r: int(r.tags[ATTEMPT_TAG]))


def test_a_preempted_free_run_resumes_after_the_premium_run_and_ends_where_an_uninterrupted_run_ends(
        tmp_path, monkeypatch, tiny_model):
    home = tmp_path / "home"
    _one_slot_platform(home, monkeypatch)
    store = LocalObjectStore(home / "landing")
    submit_job(store, "initech", "nightly", {"t.jsonl": synthetic.to_jsonl(synthetic.acme_support(120)).encode()},
               default_manifest("t.jsonl", hyperparameters={"max_steps": FREE_STEPS}))

    log = home / "daemon.log"
    daemon = start_daemon(log)
    try:
        with DagsterInstance.get() as instance:
            (free,) = wait_for("the free run", lambda: _runs(instance, "initech"), 400, daemon, log)
            wait_for("the free trainer's stop handlers", lambda: _stop_handlers_are_set(instance, free.run_id), 400,
                     daemon, log)
            held = trainers(daemon)
            assert held, "the free trainer has logged, yet no trainer process runs"
            for trainer in held:
                trainer.suspend()
            try:
                submit_job(store, "acme", "urgent",
                           {"t.jsonl": synthetic.to_jsonl(synthetic.acme_support(100)).encode()},
                           default_manifest("t.jsonl", hyperparameters={"epochs": 1}))
                wait_for("the preemption sensor to stop the free run",
                         lambda: _is_being_stopped(instance, free.run_id), 600, daemon, log)
            finally:
                for trainer in held:
                    with contextlib.suppress(psutil.NoSuchProcess):
                        trainer.resume()

            def free_run_finished():
                runs = _runs(instance, "initech")
                return runs if len(runs) == 2 and runs[-1].is_finished else None

            # Bounds, not expectations: alone it takes about 2 minutes.
            free_runs = wait_for("the free job's second attempt", free_run_finished, 1200, daemon, log)
            (premium,) = _runs(instance, "acme")
    finally:
        stop_daemon(daemon)

    stopped, resumed = free_runs
    assert stopped.status == DagsterRunStatus.CANCELED
    assert stopped.tags[PREEMPTED_TAG] == premium.run_id
    assert resumed.status == DagsterRunStatus.SUCCESS and resumed.tags[ATTEMPT_TAG] == "2"
    assert premium.status == DagsterRunStatus.SUCCESS
    with DagsterInstance.get() as instance:
        records = {r.dagster_run.run_id: r for r in instance.get_run_records(RunsFilter(
            run_ids=[stopped.run_id, premium.run_id, resumed.run_id]))}
        materializations = instance.fetch_materializations(AssetKey("adapter"), limit=10).records
    # One slot: the premium run ran after the free run stopped, and the free run came back after it.
    assert records[stopped.run_id].end_time <= records[premium.run_id].start_time
    assert records[premium.run_id].end_time <= records[resumed.run_id].start_time

    meta = next(r.asset_materialization.metadata for r in materializations if r.run_id == resumed.run_id)
    assert 0 < meta["resumed_from_step"].value < FREE_STEPS
    assert meta["steps"].value == FREE_STEPS

    ledger = UsageLedger(home / "catalog.duckdb")
    rows = {r.run_id: r for r in ledger.records()}
    assert (rows[stopped.run_id].category, rows[stopped.run_id].billable) == ("preempted", False)
    assert (rows[resumed.run_id].category, rows[resumed.run_id].billable) == ("completed", True)

    # The same spec trained without interruption, in a fresh folder.
    spec = TrainJobSpec.from_dict(meta["spec"].value)
    adapter_dir = Path(spec.output_dir) / "adapter"
    reference = tmp_path / "uninterrupted"
    # With the threads the platform gave its trainer (one slot: every core), whatever this process was given:
    # another thread count sums in another order, and the comparison is bitwise.
    done = _harness(TrainJobSpec.from_dict({**spec.to_dict(), "output_dir": str(reference)}),
                    env=cpu_thread_env(slots=1, processes=1))
    assert done.returncode == 0, done.stderr[-3000:]
    resumed_weights, reference_weights = _weights(str(adapter_dir)), _weights(str(reference / "adapter"))
    assert resumed_weights.keys() == reference_weights.keys()
    assert all((resumed_weights[k] == reference_weights[k]).all() for k in reference_weights)
    registered = {a.tenant: a for a in AdapterRegistry(home / "catalog.duckdb").list()}
    assert registered["initech"].run_id == resumed.run_id
    assert json.loads((reference / "result.json").read_text())["steps"] == FREE_STEPS
