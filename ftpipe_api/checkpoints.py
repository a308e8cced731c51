"""``GET /v1/fine_tuning/jobs/{id}/checkpoints``: the committed checkpoints of the job's trainings.

A checkpoint is listed only once committed (whole, checksummed: ``ftpipe.training.checkpoints``), with the
training and validation loss the trainer logged at its step. Newest first, as OpenAI lists them.
"""

from __future__ import annotations

import json
from pathlib import Path

from ftpipe.artifacts import ArtifactLayout
from ftpipe.training.checkpoints import CheckpointArea, step_of


def _metrics_at(checkpoint: Path, step: int) -> dict:
    try:
        history = json.loads((checkpoint / "trainer_state.json").read_text()).get("log_history", [])
    except (OSError, ValueError):
        return {}
    metrics = {}
    for entry in history:
        if isinstance(entry, dict) and entry.get("step") == step:
            if "loss" in entry:
                metrics["train_loss"] = entry["loss"]
            if "eval_loss" in entry:
                metrics["valid_loss"] = entry["eval_loss"]
    return {"step": float(step), **metrics}


def job_checkpoints(artifacts_root: str, tenant: str, job: str) -> list[dict]:
    trainings = ArtifactLayout(artifacts_root).job_dir(tenant, job) / "training"
    found = []
    for training in sorted(trainings.iterdir()) if trainings.is_dir() else []:
        for checkpoint in CheckpointArea(training / "checkpoints").committed():
            step = step_of(checkpoint)
            found.append({"object": "fine_tuning.job.checkpoint", "id": f"ftckpt-{training.name[:8]}-{step}",
                          "created_at": int(checkpoint.stat().st_mtime), "fine_tuning_job_id": job,
                          "fine_tuned_model_checkpoint": f"{job}:{training.name[:8]}:step-{step}",
                          "step_number": step, "metrics": _metrics_at(checkpoint, step)})
    return sorted(found, key=lambda c: (c["created_at"], c["step_number"]), reverse=True)
