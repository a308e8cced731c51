"""Run lm-eval on the base model and on the tuned adapter, and compare them."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path

from ftpipe.evaluation.holdout_task import (
    holdout_docs, preference_docs, write_holdout_task, write_preference_task,
)

HOLDOUT_TASK = "holdout"


@dataclass
class MetricRow:
    task: str
    metric: str
    base: float
    tuned: float

    @property
    def delta(self) -> float:
        return self.tuned - self.base


@dataclass
class EvalReport:
    base_model: str
    adapter_dir: str
    n_holdout: int
    rows: list[MetricRow]

    def metric(self, task: str, metric: str) -> MetricRow:
        return next(r for r in self.rows if r.task == task and r.metric == metric)

    def to_dict(self) -> dict:
        return {"base_model": self.base_model, "adapter_dir": self.adapter_dir, "n_holdout": self.n_holdout,
                "rows": [asdict(r) | {"delta": r.delta} for r in self.rows]}

    def to_markdown(self) -> str:
        lines = ["| task | metric | base | tuned | delta |", "|---|---|---:|---:|---:|"]
        lines += [f"| {r.task} | {r.metric} | {r.base:.3f} | {r.tuned:.3f} | {r.delta:+.3f} |" for r in self.rows]
        return "\n".join(lines)


def _evaluate(model_args: str, task_dir: Path, system_instruction: str, batch_size: int) -> dict:
    import lm_eval
    from lm_eval.tasks import TaskManager

    logging.getLogger("lm-eval").setLevel(logging.WARNING)
    results = lm_eval.simple_evaluate(
        model="hf",
        model_args=model_args,
        tasks=[HOLDOUT_TASK],
        task_manager=TaskManager(include_path=str(task_dir), include_defaults=False),
        apply_chat_template=True,
        system_instruction=system_instruction or None,
        batch_size=batch_size,
        log_samples=False,
    )
    return results["results"][HOLDOUT_TASK]


def compare_base_and_tuned(base_model_path: str, adapter_dir: str, holdout_conversations: list[list[dict]],
                           work_dir: str | Path, batch_size: int = 16,
                           holdout_pairs: list[tuple[list[dict], list[dict], list[dict]]] | None = None) -> EvalReport:
    """Held-out demonstrations are scored by exact match; held-out preference pairs (``holdout_pairs``, for a
    DPO adapter) by preference accuracy."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    work_dir = Path(work_dir)
    if holdout_pairs is not None:
        docs = preference_docs(holdout_pairs)
        write_task, metric, key = write_preference_task, "preference_accuracy", "acc,none"
    else:
        docs = holdout_docs(holdout_conversations)
        write_task, metric, key = write_holdout_task, "exact_match", "exact_match,none"
    if not docs:
        raise ValueError("the held-out split has no prompt/answer examples to evaluate")
    system = write_task(work_dir / "tasks", HOLDOUT_TASK, docs)
    common = f"pretrained={base_model_path},dtype=float32,device={device}"
    base = _evaluate(common, work_dir / "tasks", system, batch_size)
    tuned = _evaluate(f"{common},peft={adapter_dir}", work_dir / "tasks", system, batch_size)
    report = EvalReport(
        base_model=base_model_path, adapter_dir=adapter_dir, n_holdout=len(docs),
        rows=[MetricRow(HOLDOUT_TASK, metric, float(base[key]), float(tuned[key]))],
    )
    (work_dir / "eval_report.json").write_text(json.dumps(report.to_dict(), indent=2))
    return report
