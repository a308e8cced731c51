"""Checkpoints that are either whole or absent, and a resume that never trusts a broken one.

The HF Trainer writes a checkpoint file by file into ``checkpoint-N`` and ``trainer_state.json`` last, so a
kill during a save leaves a directory that looks like a checkpoint and fails to resume. Here the Trainer
writes into ``staging/``; once it is done, a checksum manifest is written into the directory and the whole
directory is renamed into the committed area in one ``rename``. Resume takes the newest committed
checkpoint whose files still match their checksums and sets aside any that do not.

Layout under a job's ``checkpoints/``::

    staging/checkpoint-N/        being written; wiped at start
    checkpoint-N/                committed: files + MANIFEST_NAME
    rejected/checkpoint-N-<why>  failed verification, kept for inspection, never resumed from
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

MANIFEST_NAME = "ftpipe-checkpoint.json"
_CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")


@dataclass(frozen=True)
class CheckpointArea:
    root: Path

    @property
    def staging(self) -> Path:
        return self.root / "staging"

    @property
    def rejected(self) -> Path:
        return self.root / "rejected"

    def committed(self) -> list[Path]:
        """Committed checkpoint directories, newest (highest step) first."""
        if not self.root.is_dir():
            return []
        found = [(int(m.group(1)), p) for p in self.root.iterdir() if (m := _CHECKPOINT_RE.match(p.name))]
        return [p for _, p in sorted(found, reverse=True)]

    def reset_staging(self) -> None:
        """A staging directory at start is what a killed save left behind: it was never committed."""
        shutil.rmtree(self.staging, ignore_errors=True)
        self.staging.mkdir(parents=True, exist_ok=True)


def step_of(checkpoint: Path) -> int:
    match = _CHECKPOINT_RE.match(checkpoint.name)
    if not match:
        raise ValueError(f"{checkpoint} is not a checkpoint-N directory")
    return int(match.group(1))


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.is_file() and p.name != MANIFEST_NAME)


def write_manifest(directory: Path, step: int) -> None:
    files = _files(directory)
    for path in files:  # the rename that commits must not reach the disk before the data it names
        _fsync(path)
    manifest = {
        "step": step,
        "files": {str(p.relative_to(directory)): {"sha256": _sha256(p), "bytes": p.stat().st_size}
                  for p in files},
    }
    tmp = directory / f".{MANIFEST_NAME}.tmp"
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True))
    _fsync(tmp)
    os.replace(tmp, directory / MANIFEST_NAME)


def commit(area: CheckpointArea, staged: Path, keep: int) -> Path:
    """Seal a fully written staged checkpoint, move it into place atomically, then prune old ones."""
    step = step_of(staged)
    write_manifest(staged, step)
    target = area.root / staged.name
    if target.exists():
        # A resumed run reached a step that an earlier attempt committed too; the new one replaces it.
        reject(area, target, "superseded")
    os.replace(staged, target)
    fsync_dir(area.root)
    prune(area, keep)
    return target


def verify(checkpoint: Path) -> str | None:
    """None when every file listed in the manifest is present with its size and checksum; else why not."""
    manifest_path = checkpoint / MANIFEST_NAME
    if not manifest_path.is_file():
        return "no checksum manifest (the save never finished)"
    try:
        listed = json.loads(manifest_path.read_text())["files"]
    except (ValueError, KeyError) as exc:
        return f"unreadable manifest: {exc}"
    if not listed:
        return "empty checkpoint"
    try:
        for name, expected in listed.items():
            path = checkpoint / name
            if not path.is_file():
                return f"{name} is missing"
            if path.stat().st_size != expected["bytes"]:
                return f"{name} has {path.stat().st_size} bytes, expected {expected['bytes']}"
            if _sha256(path) != expected["sha256"]:
                return f"{name} does not match its checksum"
    except OSError as exc:  # e.g. another rank set it aside while this one read it
        return f"unreadable: {exc}"
    return None


def latest_valid(area: CheckpointArea, log=lambda message: None, set_aside: bool = True) -> Path | None:
    """The newest committed checkpoint that verifies; broken ones are skipped and, by the one process that
    may change the area (``set_aside``), moved to ``rejected/``."""
    for checkpoint in area.committed():
        problem = verify(checkpoint)
        if problem is None:
            return checkpoint
        if set_aside:
            log(f"checkpoint {checkpoint.name} is unusable ({problem}); falling back to an older one")
            reject(area, checkpoint, "corrupt")
    return None


def prune(area: CheckpointArea, keep: int) -> list[Path]:
    """Keep the newest ``keep`` committed checkpoints."""
    removed = area.committed()[max(1, keep):]
    for checkpoint in removed:
        shutil.rmtree(checkpoint)
    return removed


def reject(area: CheckpointArea, checkpoint: Path, why: str) -> None:
    """Move a checkpoint that must never be resumed from out of the committed area, keeping it for inspection."""
    if not checkpoint.exists():
        return
    area.rejected.mkdir(parents=True, exist_ok=True)
    target = area.rejected / f"{checkpoint.name}-{why}"
    n = 1
    while target.exists():
        n += 1
        target = area.rejected / f"{checkpoint.name}-{why}-{n}"
    os.replace(checkpoint, target)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    try:
        _fsync(path)
    except OSError:  # not every filesystem lets a directory be fsynced
        pass
