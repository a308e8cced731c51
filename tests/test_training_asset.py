"""The adapter asset through Dagster: divergence is the tenant's, preemption resumes, a finished training is
reused."""

import os
import signal
import threading
import time
from pathlib import Path

import psutil
import pytest
from dagster import DagsterRunStatus, instance_for_test, materialize

from ft_assets.billing import monthly_billing
from ft_assets.datasets import raw_dataset, tokenized_dataset, validated_dataset
from ft_assets.training import adapter, pool_calibration
from ftpipe import synthetic
from ftpipe.landing import results_key, statement_key
from ftpipe.submission import default_manifest, submit_job
from ftpipe.training.pipes_main import STOP_HANDLERS_SET
from partitions.keys import partition_key
from resources import TrainerLauncherResource
from sensors.failures import failure_reason, meter_lost_attempt

pytestmark = pytest.mark.slow

UP_TO_ADAPTER = [raw_dataset, validated_dataset, tokenized_dataset, adapter]


def _materialize(instance, resources, key, attempt=1):
    return materialize(UP_TO_ADAPTER, partition_key=key, resources=resources, instance=instance,
                       raise_on_error=False, tags={"ftpipe/attempt": str(attempt)})


def _submit(resources, tenant, job, hyperparameters):
    rows = synthetic.to_jsonl(synthetic.acme_support(120)).encode()
    submit_job(resources["landing"].store(), tenant, job, {"train.jsonl": rows},
               default_manifest("train.jsonl", hyperparameters=hyperparameters))
    return partition_key(tenant, job)


def test_divergence_fails_as_the_tenants_error_with_advice_in_the_landing_zone(local_resources):
    # The highest rate a manifest may set: on the tiny model it diverged at step 10 (0.5 at step 31). Enough
    # epochs that another CPU's kernels, diverging some steps later, still diverge before the end; training
    # stops at the divergence, so they cost nothing.
    key = _submit(local_resources, "acme", "hot-lr", {"learning_rate": 1.0, "epochs": 20})
    with instance_for_test() as instance:
        instance.add_dynamic_partitions("tenant_jobs", [key])
        result = _materialize(instance, local_resources, key)
        run = instance.get_run_by_id(result.run_id)
        assert run.status == DagsterRunStatus.FAILURE
        error_class, reason = failure_reason(instance, run)
    assert error_class == "user" and "training diverged at step" in reason
    report = local_resources["landing"].store().read_bytes(results_key("acme", "hot-lr", "training_failed.md"))
    assert b"lower learning_rate from 1 to 0.1 (you set it in the manifest)" in report


def _signal_trainer_when_it_starts(artifacts_root: Path, sig: int, signalled: list) -> threading.Thread:
    """Signal the trainer process once its handlers are in place (they are before it makes its staging folder)."""

    def started() -> bool:
        return any(artifacts_root.glob("tenants/*/jobs/*/training/*/checkpoints/staging"))

    def watch():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            for child in psutil.Process().children(recursive=True):
                try:
                    is_trainer = "ftpipe.training.pipes_main" in child.cmdline()
                except psutil.Error:
                    continue
                if is_trainer and started():
                    child.send_signal(sig)
                    signalled.append(child.pid)
                    return
            time.sleep(0.05)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_a_preempted_trainer_checkpoints_and_the_next_run_resumes_from_it_and_is_billed_once_per_attempt(
        local_resources):
    key = _submit(local_resources, "acme", "spot", {"epochs": 2})
    ledger = local_resources["catalog"].ledger()
    with instance_for_test() as instance:
        instance.add_dynamic_partitions("tenant_jobs", [key])
        # Attempt 1: the trainer process dies at once, as on a lost node.
        crashed = _materialize(instance, {**local_resources,
                                          "trainer": TrainerLauncherResource(python_executable="/bin/false")},
                               key, attempt=1)
        assert not crashed.success

        # Attempt 2: preempted; the trainer checkpoints on the signal and stops.
        signalled = []
        watcher = _signal_trainer_when_it_starts(Path(local_resources["artifacts"].root), signal.SIGUSR1, signalled)
        first = _materialize(instance, local_resources, key, attempt=2)
        watcher.join(timeout=5)
        assert signalled, "the trainer was never signalled"
        run = instance.get_run_by_id(first.run_id)
        assert run.status == DagsterRunStatus.FAILURE
        error_class, reason = failure_reason(instance, run)
        assert error_class == "platform" and "trainer stopped at step 1/" in reason and "SIGUSR1" in reason

        # Attempt 3 resumes where attempt 2 stopped.
        second = _materialize(instance, local_resources, key, attempt=3)
        assert second.success
        meta = second.asset_materializations_for_node("adapter")[0].metadata
        assert meta["resumed_from_step"].value == 1
        assert meta["steps"].value > 1

        # Duplicate events: the failure sensor's fallback sees both failed runs, and the last attempt is
        # reported again; none of it adds a row.
        for failed in (crashed, first):
            assert meter_lost_attempt(instance, instance.get_run_by_id(failed.run_id), local_resources["platform"],
                                      local_resources["catalog"]) is None
        assert not ledger.record(ledger.records(run_id=second.run_id)[0])
        rows = ledger.records()
        assert [(r.run_id, r.attempt, r.category, r.billable) for r in rows] == [
            (crashed.run_id, 1, "lost", False), (first.run_id, 2, "preempted", False),
            (second.run_id, 3, "completed", True)]
        assert all(r.gpu_seconds > 0 for r in rows[1:])
        assert meta["gpu_seconds"].value == pytest.approx(rows[2].gpu_seconds, abs=1e-3)

        # The month's bill charges the completed attempt only and lists all three for the tenant.
        month = rows[0].month
        billing = materialize([monthly_billing], partition_key=f"{month}-01", resources=local_resources,
                              instance=instance)
        assert billing.success
        bill_meta = billing.asset_materializations_for_node("monthly_billing")[0].metadata
        assert bill_meta["attempts"].value == 3
        assert bill_meta["gpu_hours"].value == pytest.approx(rows[2].gpu_hours, abs=1e-6)
        assert bill_meta["dagster/row_count"].value == 1
        (bill,) = bill_meta["bills"].value.records
        assert (bill.data["tenant"], bill.data["gpu_hours"]) == ("acme", round(rows[2].gpu_hours, 4))
        statement = local_resources["landing"].store().read_bytes(statement_key("acme", month)).decode()
    assert f"- billable: {rows[2].gpu_hours:.4f} GPU-hours" in statement
    assert "| lost | refunded |" in statement and "| preempted | refunded |" in statement
    assert "| completed | yes |" in statement


def test_a_two_worker_slot_trains_under_torchrun_and_reports_once(local_resources, tmp_path):
    from resources import PlatformResource

    platform_file = tmp_path / "two-workers.yaml"
    platform_file.write_text(
        "default_pool: cpu-pair\n"
        "pools:\n  cpu-pair: {gpu: cpu, gpu_memory_gb: 8, gpus_per_slot: 2, peak_tflops: 0.046, mfu: 1.0}\n"
        "tiers:\n  premium: {priority: 10}\ntenants:\n  acme: {tier: premium}\n")
    resources = {**local_resources, "platform": PlatformResource(tenants_file=str(platform_file))}
    key = _submit(resources, "acme", "pair", {"max_steps": 6})
    with instance_for_test() as instance:
        instance.add_dynamic_partitions("tenant_jobs", [key])
        result = _materialize(instance, resources, key)
        assert result.success
        (materialization,) = result.asset_materializations_for_node("adapter")
        assert materialization.metadata["steps"].value == 6
        (usage,) = resources["catalog"].ledger().records()
        assert usage.gpus == 2  # a two-GPU slot is billed for both
        assert usage.gpu_seconds == pytest.approx(2 * (usage.ended_at - usage.started_at).total_seconds())
        logs = [r.user_message for r in instance.all_logs(result.run_id)]
    assert sum("step 5/6 loss=" in m for m in logs) == 1  # logged every 5 steps, by rank 0 only
    assert sum("step 6/6 eval_loss=" in m for m in logs) == 1  # the validation loss too, on both workers' shares
    # The workers are torchrun's children: they watch the run worker (here, this process) instead.
    assert STOP_HANDLERS_SET.format(os.getpid()) in logs
    (checkpoint,) = Path(local_resources["artifacts"].root).glob(
        "tenants/acme/jobs/pair/training/*/checkpoints/checkpoint-*")
    assert (checkpoint / "rng_state_1.pth").is_file()  # the second worker really trained


def test_a_second_run_of_a_trained_partition_reuses_the_training_without_a_trainer_or_a_bill(local_resources):
    key = _submit(local_resources, "acme", "twice", {"max_steps": 6})
    ledger = local_resources["catalog"].ledger()
    with instance_for_test() as instance:
        instance.add_dynamic_partitions("tenant_jobs", [key])
        first = _materialize(instance, local_resources, key)
        assert first.success
        meta = {k: v.value for k, v in first.asset_materializations_for_node("adapter")[0].metadata.items()}
        assert meta["reused_training"] is False and meta["billed"] is True
        # How long it took against the pre-flight's expectation, rounded to 3 significant digits.
        assert meta["measured_steps"] == 6 and meta["pool"] == "cpu-local"
        for name in ("measured_seconds", "seconds_per_step", "measured_over_estimate", "overhead_seconds",
                     "expected_seconds", "expected_over_measured"):
            assert meta[name] == float(f"{meta[name]:.3g}"), name
        assert meta["seconds_per_step"] == pytest.approx(meta["measured_seconds"] / 6, rel=0.01)
        calibration = [(meta["measured_over_estimate"], meta["overhead_seconds"])]
        assert pool_calibration(instance, "cpu-local") == calibration
        assert pool_calibration(instance, "h100x1") == []

        # Launched again by hand: a trainer would fail at once, so success means that none was started.
        second = _materialize(instance, {**local_resources,
                                         "trainer": TrainerLauncherResource(python_executable="/bin/false")}, key)
        assert second.success
        again = {k: v.value for k, v in second.asset_materializations_for_node("adapter")[0].metadata.items()}
        assert again["reused_training"] is True and again["billed"] is False and again["gpu_seconds"] == 0
        assert (again["steps"], again["final_loss"]) == (6, meta["final_loss"])
        # The validation loss, and which weights the adapter holds, read back from the record.
        assert meta["checkpoint_selection"] == "best" and meta["evaluations"] == 6  # 6 steps: automatic eval_steps 1
        for name in ("eval_loss", "best_step", "best_eval_loss", "checkpoint_selection", "selected_step",
                     "early_stopped", "evaluations"):
            assert again[name] == meta[name], name
        assert again["loss_curve"].startswith("![loss curve](data:image/png;base64,")
        assert second.output_for_node("adapter").adapter_dir == first.output_for_node("adapter").adapter_dir
        assert any("reusing the finished training" in r.user_message for r in instance.all_logs(second.run_id))
        assert pool_calibration(instance, "cpu-local") == calibration  # not counted twice
    assert [r.run_id for r in ledger.records()] == [first.run_id]
