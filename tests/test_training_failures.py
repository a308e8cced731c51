"""NaN aborts with advice and keeps no poisoned checkpoint; out of memory retries once with half the micro-batch."""

import pytest
import torch
from transformers import TrainerCallback

from ftpipe.training import checkpoints
from ftpipe.training.failures import PLATFORM, USER, OutOfMemory, TimeLimitExceeded, TrainingDiverged
from ftpipe.training.runner import run_training
from tests.helpers.training import tiny_spec

pytestmark = pytest.mark.slow


# Every run here: a loss each step and a checkpoint every 5, on sft_train_file into tmp_path.
SETTINGS = dict(max_steps=20, micro_batch_size=8, logging_steps=1, save_steps=5)


class PoisonWeightAt(TrainerCallback):
    """Writes NaN into one LoRA weight after step ``step``: a deterministic divergence."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step == self.step:
            lora_a = next(p for n, p in model.named_parameters() if "lora_A" in n)
            with torch.no_grad():
                lora_a[0, 0] = float("nan")


class OutOfMemoryAbove(TrainerCallback):
    """Raises what CUDA raises when a micro-batch is larger than ``limit``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.raised = 0

    def on_step_begin(self, args, state, control, **kwargs):
        if args.per_device_train_batch_size > self.limit:
            self.raised += 1
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


def test_nan_aborts_with_advice_and_keeps_no_checkpoint_after_it(tiny_model, sft_train_file, tmp_path):
    spec = tiny_spec(tiny_model, sft_train_file[0], tmp_path, SETTINGS, tenant_overrides=["learning_rate"])
    with pytest.raises(TrainingDiverged) as raised:
        run_training(spec, extra_callbacks=[PoisonWeightAt(7)])
    failure = raised.value
    assert failure.error_class == USER
    assert "diverged at step 8" in failure.message and "loss=nan" in failure.message
    assert any("lower learning_rate from 0.002 to 0.0002 (you set it in the manifest)" in a for a in failure.advice)
    area = checkpoints.CheckpointArea(tmp_path / "checkpoints")
    assert [p.name for p in area.committed()] == ["checkpoint-5"]  # nothing after the poisoned step
    assert not (tmp_path / "adapter").exists()


def test_a_huge_learning_rate_diverges_without_any_injection(tiny_model, sft_train_file, tmp_path):
    with pytest.raises(TrainingDiverged, match="diverged at step"):
        run_training(tiny_spec(tiny_model, sft_train_file[0], tmp_path, SETTINGS, learning_rate=1e4))


def test_out_of_memory_retries_once_with_half_the_micro_batch_and_the_same_effective_batch(
        tiny_model, sft_train_file, tmp_path):
    oom = OutOfMemoryAbove(4)
    messages = []
    result = run_training(tiny_spec(tiny_model, sft_train_file[0], tmp_path, SETTINGS), extra_callbacks=[oom],
                          log=messages.append)
    assert oom.raised == 1 and result.oom_retries == 1
    assert (result.micro_batch_size, result.gradient_accumulation_steps) == (4, 2)
    assert result.outcome == "completed" and result.steps == 20
    assert any("retrying with micro_batch_size=4 and gradient_accumulation_steps=2" in m for m in messages)


@pytest.mark.parametrize("overrides, error_class", [([], PLATFORM), (["micro_batch_size"], USER)])
def test_out_of_memory_twice_gives_up_and_says_whose_setting_it_was(tiny_model, sft_train_file, tmp_path,
                                                                    overrides, error_class):
    oom = OutOfMemoryAbove(1)
    with pytest.raises(OutOfMemory) as raised:
        run_training(tiny_spec(tiny_model, sft_train_file[0], tmp_path, SETTINGS, tenant_overrides=overrides),
                     extra_callbacks=[oom])
    assert oom.raised == 2  # the original and exactly one retry
    assert raised.value.error_class == error_class
    assert "micro_batch_size=4" in raised.value.message
    assert ("remove your micro_batch_size override" in raised.value.report()) == bool(overrides)


def test_a_job_past_its_time_limit_stops_at_a_checkpoint_as_the_tenants_failure(tiny_model, sft_train_file, tmp_path):
    spec = tiny_spec(tiny_model, sft_train_file[0], tmp_path, SETTINGS, max_steps=100_000, save_steps=100_000,
                     max_runtime_seconds=6)
    with pytest.raises(TimeLimitExceeded) as failure:
        run_training(spec)
    assert failure.value.error_class == USER
    assert "ran past its time limit of 0.1 minutes" in failure.value.message
    assert "of 100000; its checkpoint checkpoint-" in failure.value.message
    area = checkpoints.CheckpointArea(tmp_path / "checkpoints")
    kept = checkpoints.latest_valid(area, lambda message: None)
    assert kept is not None and 0 < int(kept.name.split("-")[1]) < 100_000
