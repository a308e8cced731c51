"""Exact resume of a real trainer process after SIGKILL, a corrupt checkpoint, a stop signal, an orphaning.

Every run here is a separate process (tests/helpers/trainer_harness.py) so that the kills are real; all of
them run the same spec, so each must end where the uninterrupted reference ends. The loss is logged every
5 steps and the checkpoints every 10: a stop between two logging steps resumes mid-window, and the first loss
logged after it must still average the same 5 steps as the reference's.
"""

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ftpipe.training.checkpoints import MANIFEST_NAME
from ftpipe.training.local import EXIT_INTERRUPTED
from ftpipe.training.spec import TrainJobSpec
from tests.helpers.training import tiny_spec

pytestmark = pytest.mark.slow

HARNESS = Path(__file__).parent / "helpers" / "trainer_harness.py"
REPO = Path(__file__).resolve().parents[1]


# The one spec every run here trains (only the output folder differs).
SETTINGS = dict(learning_rate=2e-3, max_steps=40, micro_batch_size=4, logging_steps=5, save_steps=10, save_minutes=600,
               keep_checkpoints=2)


def _harness(spec: TrainJobSpec, *flags: str, wait: bool = True, env: dict | None = None):
    """``env``: on top of this process's environment (a platform trainer's thread settings, say)."""
    out = Path(spec.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "spec.json").write_text(json.dumps(dataclasses.asdict(spec)))
    command = [sys.executable, str(HARNESS), str(out / "spec.json"), str(out / "result.json"), *flags]
    env = {**os.environ, **(env or {}), "PYTHONPATH": str(REPO)}
    if not wait:
        return subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    return subprocess.run(command, env=env, stderr=subprocess.PIPE, text=True, timeout=300)


def _result(spec: TrainJobSpec) -> dict:
    return json.loads((Path(spec.output_dir) / "result.json").read_text())


def _weights(adapter_dir: str) -> dict:
    from safetensors.torch import load_file

    return load_file(str(Path(adapter_dir) / "adapter_model.safetensors"))


@pytest.fixture(scope="module")
def reference(tiny_model, sft_train_file, tmp_path_factory) -> dict:
    spec = tiny_spec(tiny_model, sft_train_file[0], tmp_path_factory.mktemp("reference"), SETTINGS)
    done = _harness(spec)
    assert done.returncode == 0, done.stderr[-3000:]
    return _result(spec)


def _assert_same_run(result: dict, reference: dict) -> None:
    assert result["outcome"] == "completed" and result["steps"] == reference["steps"] == 40
    # Every logged loss, including those of the steps before the interruption, as the job's history.
    steps = [s for s, _ in reference["loss_history"]]
    assert [s for s, _ in result["loss_history"]] == steps == list(range(5, 41, 5))
    for (_, got), (_, want) in zip(result["loss_history"], reference["loss_history"]):
        assert abs(got - want) <= 1e-6
    tuned, expected = _weights(result["adapter_dir"]), _weights(reference["adapter_dir"])
    assert tuned.keys() == expected.keys()
    assert max((tuned[k] - expected[k]).abs().max().item() for k in tuned) <= 1e-6


def test_sigkill_mid_interval_then_resume_ends_exactly_where_the_uninterrupted_run_ends(
        tiny_model, sft_train_file, tmp_path, reference):
    spec = tiny_spec(tiny_model, sft_train_file[0], tmp_path / "job", SETTINGS)
    killed = _harness(spec, "--sigkill-at-step", "13")
    assert killed.returncode == -signal.SIGKILL
    committed = sorted(p.name for p in (tmp_path / "job" / "checkpoints").glob("checkpoint-*"))
    assert committed == ["checkpoint-10"]

    resumed = _harness(spec)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    result = _result(spec)
    assert result["resumed_from"].endswith("checkpoint-10")
    _assert_same_run(result, reference)


def test_a_corrupt_newest_checkpoint_falls_back_to_the_previous_one(tiny_model, sft_train_file, tmp_path,
                                                                    reference):
    spec = tiny_spec(tiny_model, sft_train_file[0], tmp_path / "job", SETTINGS)
    assert _harness(spec, "--sigkill-at-step", "25").returncode == -signal.SIGKILL
    root = tmp_path / "job" / "checkpoints"
    weights = root / "checkpoint-20" / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # a torn write
    # ... and a save that died halfway, left in staging.
    (root / "staging" / "checkpoint-30").mkdir(parents=True)
    (root / "staging" / "checkpoint-30" / "optimizer.pt").write_bytes(b"\0" * 10)

    resumed = _harness(spec)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "checkpoint-20 is unusable" in resumed.stderr
    result = _result(spec)
    assert result["resumed_from"].endswith("checkpoint-10")
    assert (root / "rejected" / "checkpoint-20-corrupt").is_dir()
    _assert_same_run(result, reference)


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT", "SIGUSR1"])
def test_a_stop_signal_checkpoints_at_the_next_step_and_exits_cleanly(tiny_model, sft_train_file, tmp_path,
                                                                      reference, sig):
    spec = tiny_spec(tiny_model, sft_train_file[0], tmp_path / "job", SETTINGS)
    stopped = _harness(spec, "--signal-at-step", f"17:{sig}")
    assert stopped.returncode == EXIT_INTERRUPTED, stopped.stderr[-3000:]
    result = _result(spec)
    assert result["outcome"] == "interrupted" and result["stop_reason"] == sig and result["adapter_dir"] is None
    # The work lost is bounded by the handshake (one step), not by the 10-step checkpoint interval.
    assert result["last_checkpoint"].endswith("checkpoint-17")
    assert (Path(result["last_checkpoint"]) / MANIFEST_NAME).is_file()

    if sig != "SIGTERM":
        return  # one resume suffices to show that the stop checkpoint resumes exactly
    resumed = _harness(spec)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    result = _result(spec)
    assert result["resumed_from"].endswith("checkpoint-17")
    # Step 20's loss averages steps 16-20, two of them trained before the stop, as in the reference.
    assert dict(result["loss_history"])[20] == pytest.approx(dict(reference["loss_history"])[20], abs=1e-6)
    _assert_same_run(result, reference)


def test_the_trainer_stops_at_a_checkpoint_when_its_parent_dies(tiny_model, sft_train_file, tmp_path):
    """A SIGKILLed run worker sends no signal; the trainer must still not keep running (and holding a GPU)."""
    spec = tiny_spec(tiny_model, sft_train_file[0], tmp_path / "job", SETTINGS, max_steps=10_000)
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "spec.json").write_text(json.dumps(dataclasses.asdict(spec)))
    steps_file = tmp_path / "steps"
    launcher = (
        "import os, subprocess, sys, time\n"
        f"p = subprocess.Popen([sys.executable, {str(HARNESS)!r}, {str(tmp_path / 'job' / 'spec.json')!r},"
        f" {str(tmp_path / 'job' / 'result.json')!r}, '--step-seconds', '0.05', '--steps-file', {str(steps_file)!r}],"
        f" env={{**os.environ, 'PYTHONPATH': {str(REPO)!r}}})\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(3600)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", launcher], stdout=subprocess.PIPE, text=True)
    trainer_pid = int(parent.stdout.readline())
    deadline = time.monotonic() + 120
    while not (steps_file.exists() and steps_file.read_text() and int(steps_file.read_text()) >= 3):
        assert time.monotonic() < deadline, "the trainer never started stepping"
        time.sleep(0.1)
    parent.kill()
    parent.wait()

    deadline = time.monotonic() + 60
    while _alive(trainer_pid):
        assert time.monotonic() < deadline, "the orphaned trainer kept running"
        time.sleep(0.2)
    result = json.loads((tmp_path / "job" / "result.json").read_text())
    assert result["outcome"] == "interrupted" and "parent process" in result["stop_reason"]
    assert result["steps"] < 10_000 and result["last_checkpoint"].endswith(f"checkpoint-{result['steps']}")


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status  # a zombie has exited; only its reaper is missing
