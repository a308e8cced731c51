"""Checkpoint retention: once a training directory has been idle for a while, keep only its newest
checkpoints and its final adapter.

Checkpoints exist so that an interrupted run can resume; once a job has finished (its ``adapter/`` and
training result are written) or has been left alone for long enough, all but the newest ``keep`` are dead
weight, at hundreds of MB each for a real model, and so are a finished job's best-evaluated weights
(``best/``, copied into its adapter). An unfinished directory always keeps at least one checkpoint and its
best weights, so a job can still be resumed. The final adapter is never deleted; it is made read-only, like a
registered one. A directory that changed within ``idle`` is skipped, because a run may be writing it.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from ftpipe.training.checkpoints import CheckpointArea
from ftpipe.training.runner import TRAINING_RESULT


@dataclass
class RetentionReport:
    removed: list[str] = field(default_factory=list)
    freed_bytes: int = 0
    final_adapters: list[str] = field(default_factory=list)
    skipped_active: list[str] = field(default_factory=list)


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _last_change(training_dir: Path, area: CheckpointArea) -> float:
    entries = [training_dir, *training_dir.iterdir()]
    for folder in (area.root, area.staging):
        if folder.is_dir():
            entries += [folder, *folder.iterdir()]
    return max(p.stat().st_mtime for p in entries)


def _remove(path: Path, report: RetentionReport) -> None:
    report.freed_bytes += _size(path)
    report.removed.append(str(path))
    shutil.rmtree(path)


def apply_retention(artifacts_root: str | Path, keep: int, idle: timedelta, now: datetime) -> RetentionReport:
    report = RetentionReport()
    for training_dir in sorted(Path(artifacts_root).glob("tenants/*/jobs/*/training/*")):
        area = CheckpointArea(training_dir / "checkpoints")
        if now.timestamp() - _last_change(training_dir, area) < idle.total_seconds():
            report.skipped_active.append(str(training_dir))
            continue
        final = training_dir / "adapter"
        finished = final.is_dir() and (training_dir / TRAINING_RESULT).is_file()
        for checkpoint in area.committed()[keep if finished else max(1, keep):]:
            _remove(checkpoint, report)
        for leftover in (area.staging, area.rejected):  # half-written saves, and broken ones kept for inspection
            if leftover.is_dir():
                _remove(leftover, report)
        best = training_dir / "best"  # the best-evaluated weights: copied into the adapter once finished
        if finished and best.is_dir():
            _remove(best, report)
        if finished:
            for path in final.rglob("*"):
                if path.is_file():
                    path.chmod(0o444)
            report.final_adapters.append(str(final))
    return report
