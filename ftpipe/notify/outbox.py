"""What a run has to tell its tenant, written by the step that decides it and sent by a sensor after the run.

The step that registers an adapter knows the event and its payload (gates, advice, reports); sending it from
there would hold the run, and with it the job's GPU slot, while a tenant's endpoint is slow. So the step
writes the notice beside the run's other files, and a sensor delivers it once the run has ended, once per
job: the delivery id names the job and the version of its manifest, so another attempt of the same job (a
resume, a hand launch) repeats the id and the receiver drops the repeat.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

NOTICE_FILE = "notice.json"


def write_notice(run_dir: Path, event: str, payload: dict) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    target = run_dir / NOTICE_FILE
    with tempfile.NamedTemporaryFile("w", dir=run_dir, delete=False, suffix=".tmp") as f:
        json.dump({"event": event, "payload": payload}, f, sort_keys=True)
    os.replace(f.name, target)  # whole or absent: a sensor never reads half a notice
    return target


def read_notice(run_dir: Path) -> tuple[str, dict] | None:
    try:
        notice = json.loads((run_dir / NOTICE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return notice["event"], notice["payload"]


def delivery_id(tenant: str, job: str, version: str, event: str) -> str:
    return f"{tenant}/{job}@{version}:{event}"
