"""A multi-GPU slot's launch path, proven on the CPU: 2 gloo processes under torchrun match one process.

DDP (adapters) and FSDP (full fine-tunes) each train the tiny model for 12 steps with a micro-batch of 4 per
process; the single-process reference uses a micro-batch of 8, the same examples per optimizer step.
"""

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ftpipe.launch.command import worker_command
from ftpipe.training.spec import TrainJobSpec

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]


def _train(spec: TrainJobSpec, processes: int) -> dict:
    out = Path(spec.output_dir)
    out.mkdir(parents=True)
    (out / "spec.json").write_text(json.dumps(dataclasses.asdict(spec)))
    command = worker_command(sys.executable, "ftpipe.training.local", processes)
    done = subprocess.run([*command, str(out / "spec.json"), str(out / "result.json")], text=True,
                          stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((out / "result.json").read_text())


def _weights(result: dict) -> dict:
    from safetensors.torch import load_file

    (file,) = [p for p in Path(result["adapter_dir"]).glob("*.safetensors")]
    return load_file(str(file))


@pytest.mark.parametrize("method, lr, weight_tolerance", [("lora", 2e-3, 1e-4), ("full", 3e-4, 1e-5)])
def test_two_process_run_matches_one_process(tiny_model, sft_train_file, tmp_path, method, lr, weight_tolerance):
    base = TrainJobSpec(base_model_path=tiny_model.path, train_file=str(sft_train_file[0]), output_dir="",
                        method=method, learning_rate=lr, max_steps=12, logging_steps=1, save_steps=6)
    single = _train(dataclasses.replace(base, output_dir=str(tmp_path / "single"), micro_batch_size=8), 1)
    double = _train(dataclasses.replace(base, output_dir=str(tmp_path / "double"), micro_batch_size=4), 2)

    assert double["steps"] == single["steps"] == 12
    for (step, got), (_, want) in zip(double["loss_history"], single["loss_history"]):
        assert abs(got - want) <= 1e-5, step
    a, b = _weights(single), _weights(double)
    assert a.keys() == b.keys()
    assert max((a[k] - b[k]).abs().max().item() for k in a) <= weight_tolerance
    # Every rank's RNG state is in the committed checkpoint, so a 2-process run resumes exactly too.
    committed = Path(double["last_checkpoint"])
    assert {"rng_state_0.pth", "rng_state_1.pth"} <= {p.name for p in committed.iterdir()}
