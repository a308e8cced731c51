"""Checkpoints come every N steps *and* every M minutes, whichever is first."""

import time

import pytest
from transformers import TrainerCallback

from ftpipe.training import checkpoints
from ftpipe.training.runner import run_training
from tests.helpers.training import tiny_spec

pytestmark = pytest.mark.slow


class SlowSteps(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        time.sleep(0.1)


def test_the_time_rule_saves_between_step_checkpoints(tiny_model, sft_train_file, tmp_path):
    spec = tiny_spec(tiny_model, sft_train_file[0], tmp_path, max_steps=12, micro_batch_size=8, save_steps=10**6,
                     save_minutes=0.25 / 60, keep_checkpoints=20)
    result = run_training(spec, extra_callbacks=[SlowSteps()])
    steps = sorted(checkpoints.step_of(p) for p in checkpoints.CheckpointArea(tmp_path / "checkpoints").committed())
    # A step takes over 0.1 s and the interval is 0.25 s: a checkpoint about every third step, none by step count.
    assert len(steps) >= 3 and all(b - a <= 4 for a, b in zip(steps, steps[1:]))
    assert result.last_checkpoint.endswith(f"checkpoint-{steps[-1]}")
