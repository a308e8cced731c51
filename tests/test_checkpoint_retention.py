"""Nightly checkpoint retention: idle training folders keep their newest checkpoints and final adapter."""

import os
import stat
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from dagster import instance_for_test

from ft_assets.definitions import build_defs
from ftpipe.training import checkpoints
from ftpipe.training.checkpoints import CheckpointArea
from ftpipe.training.retention import apply_retention
from ftpipe.training.runner import TRAINING_RESULT


def _training_dir(root: Path, job: str, steps: list[int], finished: bool, age_hours: float) -> Path:
    folder = root / "tenants" / "acme" / "jobs" / job / "training" / "abc123"
    area = CheckpointArea(folder / "checkpoints")
    area.reset_staging()
    for step in steps:
        staged = area.staging / f"checkpoint-{step}"
        staged.mkdir()
        (staged / "adapter_model.safetensors").write_bytes(b"w" * 1000)
        checkpoints.commit(area, staged, keep=10)
    (area.staging / "checkpoint-99").mkdir()  # a save that a kill interrupted
    (area.rejected / "checkpoint-5-corrupt").mkdir(parents=True)  # set aside by an earlier resume
    if finished:
        (folder / "adapter").mkdir()
        (folder / "adapter" / "adapter_model.safetensors").write_bytes(b"final")
        (folder / TRAINING_RESULT).write_text("{}")
    then = time.time() - age_hours * 3600
    for path in [folder, *folder.rglob("*")]:
        os.utime(path, (then, then))
    return folder


def test_idle_folders_keep_the_newest_checkpoints_and_the_final_adapter(tmp_path):
    done = _training_dir(tmp_path, "done", [10, 20, 30], finished=True, age_hours=48)
    stalled = _training_dir(tmp_path, "stalled", [10, 20], finished=False, age_hours=48)
    active = _training_dir(tmp_path, "active", [10, 20, 30], finished=False, age_hours=1)
    report = apply_retention(tmp_path, keep=0, idle=timedelta(hours=24), now=datetime.now(timezone.utc))

    # Finished: no checkpoint is needed any more; the final adapter stays, read-only.
    assert CheckpointArea(done / "checkpoints").committed() == []
    final = done / "adapter" / "adapter_model.safetensors"
    assert final.read_bytes() == b"final" and not final.stat().st_mode & stat.S_IWUSR
    assert report.final_adapters == [str(done / "adapter")]
    assert not (done / "checkpoints" / "rejected").exists() and not (done / "checkpoints" / "staging").exists()
    # Unfinished: still resumable from its newest checkpoint, whatever keep says.
    assert [p.name for p in CheckpointArea(stalled / "checkpoints").committed()] == ["checkpoint-20"]
    assert not (stalled / "checkpoints" / "staging").exists()
    # Changed an hour ago: a run may be writing it.
    assert len(CheckpointArea(active / "checkpoints").committed()) == 3
    assert report.skipped_active == [str(active)]
    assert report.freed_bytes >= 4 * 1000


def test_the_retention_job_applies_the_platform_policy(local_resources, platform_file):
    platform_file.write_text(platform_file.read_text() + "retention: {keep_checkpoints: 2, idle_hours: 12}\n")
    root = Path(local_resources["artifacts"].root)
    done = _training_dir(root, "done", [10, 20, 30], finished=True, age_hours=13)
    with instance_for_test() as instance:
        result = build_defs(local_resources).resolve_job_def("checkpoint_retention").execute_in_process(
            instance=instance)
        assert result.success
        logs = [r.user_message for r in instance.all_logs(result.run_id)]
    assert [p.name for p in CheckpointArea(done / "checkpoints").committed()] == ["checkpoint-30", "checkpoint-20"]
    assert any("kept 1 final adapter(s) read-only" in m for m in logs)
