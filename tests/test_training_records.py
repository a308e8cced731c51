"""The record of a finished training, which lets a later run of the same spec reuse it, and the calibration of
the pre-flight's time estimate by what a pool measured."""

import dataclasses
import json

import pytest

from ftpipe.training.cost import calibrated_seconds
from ftpipe.training.runner import TRAINING_RESULT, TrainResult, completed_training, save_completed
from ftpipe.training.spec import TrainJobSpec


@pytest.fixture
def finished(tmp_path) -> TrainJobSpec:
    spec = TrainJobSpec(base_model_path="base", train_file="train.parquet", output_dir=str(tmp_path), max_steps=20)
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_model.safetensors").write_bytes(b"w" * 100)
    (adapter / "adapter_config.json").write_text("{}")
    result = TrainResult(outcome="completed", adapter_dir=str(adapter), steps=20, max_steps=20, train_loss=1.5,
                         final_loss=1.25, trained_tokens=1000, seconds=4.0, tokens_per_second=250.0,
                         loss_history=[(5, 2.0), (20, 1.25)],
                         resumed_from=str(tmp_path / "checkpoints" / "checkpoint-10"),
                         last_checkpoint=None, micro_batch_size=8, gradient_accumulation_steps=1, oom_retries=0)
    save_completed(spec, result)
    return spec


def test_a_completed_training_is_found_for_its_own_spec(finished):
    record = completed_training(finished)
    assert record["steps"] == 20 and record["loss_history"] == [[5, 2.0], [20, 1.25]]
    assert record["steps_run"] == 10  # resumed from step 10: this attempt's seconds cover 10 steps
    assert record["process_seconds"] > 0
    assert completed_training(dataclasses.replace(finished, learning_rate=1e-3)) is None


def test_a_damaged_adapter_or_record_is_not_reused(finished, tmp_path):
    weights = tmp_path / "adapter" / "adapter_model.safetensors"
    weights.write_bytes(b"w" * 50)  # a torn copy
    assert completed_training(finished) is None
    weights.write_bytes(b"w" * 100)
    assert completed_training(finished) is not None
    record = tmp_path / TRAINING_RESULT
    # A record written before records named their spec.
    record.write_text(json.dumps({"loss_history": [], "final_loss": 1.0, "steps": 20}))
    assert completed_training(finished) is None
    record.write_text("{")
    assert completed_training(finished) is None


def test_the_estimate_is_scaled_by_the_median_of_the_pools_measured_ratios():
    assert calibrated_seconds(10.0, []) == 10.0  # no history: the FLOP estimate itself
    runs = [(120.0, 8.0), (80.0, 9.0), (100.0, 10.0), (5000.0, 300.0)]  # the last one ran on a noisy node
    assert calibrated_seconds(10.0, runs) == pytest.approx(9.5 + 10.0 * 110.0)
    assert calibrated_seconds(10.0, [(0.0, 1.0), (float("nan"), 1.0), (50.0, 2.0)]) == pytest.approx(2.0 + 500.0)
