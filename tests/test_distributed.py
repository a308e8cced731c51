"""A multi-GPU slot's launch path, proven on the CPU: 2 gloo processes under torchrun match one process.

DDP (adapters) and FSDP (full fine-tunes) each train the tiny model for 12 steps with a micro-batch of 4 per
process; the single-process reference uses a micro-batch of 8, the same examples per optimizer step. And the
workers, grandchildren of the run worker under torchrun, stop when the run worker is killed.
"""

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ftpipe.launch.command import worker_command
from ftpipe.training.spec import TrainJobSpec
from tests.helpers.training import tiny_spec
from tests.test_resume import _alive

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
    base = tiny_spec(tiny_model, sft_train_file[0], "", method=method, learning_rate=lr, max_steps=12,
                     logging_steps=1, save_steps=6)
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


def test_torchrun_workers_stop_when_the_run_worker_that_launched_them_is_killed(tmp_path):
    """torchrun outlives a SIGKILLed run worker, so its workers' parent never changes; they watch the run worker."""
    run_worker = (
        "import os, subprocess, sys, time\n"
        "from ftpipe.launch.command import WATCH_PID_ENV, worker_command\n"
        "command = worker_command(sys.executable, 'tests.helpers.watchdog_worker', 2)\n"
        "torchrun = subprocess.Popen(command, env={**os.environ, WATCH_PID_ENV: str(os.getpid())})\n"
        "print(torchrun.pid, flush=True)\n"
        "time.sleep(3600)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "WATCHDOG_OUT": str(tmp_path)}
    parent = subprocess.Popen([sys.executable, "-c", run_worker], stdout=subprocess.PIPE, text=True, env=env,
                              cwd=REPO)
    torchrun = int(parent.stdout.readline())
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"pid-{rank}").is_file() for rank in (0, 1)):
        assert time.monotonic() < deadline, "the workers never started"
        time.sleep(0.1)
    workers = [int((tmp_path / f"pid-{rank}").read_text()) for rank in (0, 1)]
    assert all(_alive(pid) for pid in [torchrun, *workers])

    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in [torchrun, *workers]):
        assert time.monotonic() < deadline, "torchrun or its workers outlived the run worker"
        time.sleep(0.1)
    reasons = [(tmp_path / f"stopped-{rank}").read_text() for rank in (0, 1)]
    assert reasons == [f"run worker {parent.pid} exited"] * 2
