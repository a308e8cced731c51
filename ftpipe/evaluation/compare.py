"""Run lm-eval on the base model and on the tuned adapter, and compare them.

Two suites, each scored for both models: the tenant's held-out split (exact match, or preference accuracy
for a DPO adapter, and the perplexity of the reference answers) and the platform's golden set (exact match
and perplexity), which shows what the fine-tune cost the base model's general skills. Each model is loaded
once and runs both suites; the suites differ in their system instruction, which lm-eval sets per call.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path

from ftpipe.evaluation.golden import load_golden_set
from ftpipe.evaluation.holdout_task import (
    answer_docs, holdout_docs, preference_docs, write_holdout_task, write_perplexity_task, write_preference_task,
)

HOLDOUT_TASK = "holdout"
GOLDEN_TASK = "golden"


@dataclass
class MetricRow:
    task: str
    metric: str
    base: float
    tuned: float
    higher_is_better: bool = True

    @property
    def delta(self) -> float:
        return self.tuned - self.base

    @property
    def improved(self) -> bool:
        return self.delta > 0 if self.higher_is_better else self.delta < 0


@dataclass
class EvalReport:
    base_model: str
    adapter_dir: str
    n_holdout: int
    rows: list[MetricRow]
    n_golden: int = 0
    golden_set_digest: str = ""

    def metric(self, task: str, metric: str) -> MetricRow:
        return next(r for r in self.rows if r.task == task and r.metric == metric)

    def to_dict(self) -> dict:
        return {"base_model": self.base_model, "adapter_dir": self.adapter_dir, "n_holdout": self.n_holdout,
                "n_golden": self.n_golden, "golden_set_digest": self.golden_set_digest,
                "rows": [asdict(r) | {"delta": r.delta, "improved": r.improved} for r in self.rows]}

    def to_markdown(self) -> str:
        lines = ["| task | metric | base | tuned | delta | better is |", "|---|---|---:|---:|---:|---|"]
        lines += [f"| {r.task} | {r.metric} | {r.base:.3f} | {r.tuned:.3f} | {r.delta:+.3f} | "
                  f"{'higher' if r.higher_is_better else 'lower'} |" for r in self.rows]
        return "\n".join(lines)


@dataclass
class Suite:
    """Tasks scored under one system instruction; ``metrics``: (task, metric label, lm-eval key, higher is better)."""

    name: str
    task_dir: Path
    system: str
    metrics: list[tuple[str, str, str, bool]]


def write_suite(name: str, task_dir: Path, docs: list[dict], count_tokens) -> Suite:
    """A generation or preference task over ``docs`` and the perplexity of their reference answers."""
    if "choices" in docs[0]:
        system = write_preference_task(task_dir, name, docs)
        primary = (name, "preference_accuracy", "acc,none", True)
    else:
        system = write_holdout_task(task_dir, name, docs)
        primary = (name, "exact_match", "exact_match,none", True)
    write_perplexity_task(task_dir, f"{name}_perplexity", answer_docs(docs), count_tokens)
    return Suite(name, task_dir, system,
                  [primary, (f"{name}_perplexity", "perplexity", "perplexity,none", False)])


def run_suite(lm, suite: Suite) -> dict[tuple[str, str], float]:
    import lm_eval
    from lm_eval.tasks import TaskManager

    logging.getLogger("lm-eval").setLevel(logging.WARNING)
    results = lm_eval.simple_evaluate(
        model=lm,
        tasks=sorted({task for task, _, _, _ in suite.metrics}),
        task_manager=TaskManager(include_path=str(suite.task_dir), include_defaults=False),
        apply_chat_template=True,
        system_instruction=suite.system or None,
        bootstrap_iters=0,
        log_samples=False,
    )["results"]
    return {(suite.name, label): float(results[task][key]) for task, label, key, _ in suite.metrics}


def answer_token_counter(base_model_path: str):
    """Counts tokens of a reference answer as the base model's tokenizer does, for per-token perplexity."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base_model_path)
    return lambda text: len(tokenizer(text, add_special_tokens=False).input_ids)


def score_model(base_model_path: str, peft: str | None, suites: list[Suite],
                batch_size: int = 16) -> dict[tuple[str, str], float]:
    """One model, the base or the base with an adapter, loaded once and scored on every suite. Every
    evaluation loads models here, so that the nightly re-evaluation scores exactly as registration did."""
    import torch
    from lm_eval.models.huggingface import HFLM

    device = "cuda" if torch.cuda.is_available() else "cpu"
    lm = HFLM(pretrained=base_model_path, peft=peft, dtype="float32", device=device, batch_size=batch_size)
    return {k: v for suite in suites for k, v in run_suite(lm, suite).items()}


def compare_base_and_tuned(base_model_path: str, adapter_dir: str, holdout_conversations: list[list[dict]],
                           work_dir: str | Path, batch_size: int = 16,
                           holdout_pairs: list[tuple[list[dict], list[dict], list[dict]]] | None = None,
                           golden_set: str | Path | None = None) -> EvalReport:
    """Held-out demonstrations are scored by exact match; held-out preference pairs (``holdout_pairs``, for a
    DPO adapter) by preference accuracy; both also by the perplexity of the reference (chosen) answers."""
    work_dir = Path(work_dir)
    docs = preference_docs(holdout_pairs) if holdout_pairs is not None else holdout_docs(holdout_conversations)
    if not docs:
        raise ValueError("the held-out split has no prompt/answer examples to evaluate")
    golden_docs, golden_digest = load_golden_set(golden_set)
    count_tokens = answer_token_counter(base_model_path)
    suites = [write_suite(HOLDOUT_TASK, work_dir / "tasks" / HOLDOUT_TASK, docs, count_tokens),
              write_suite(GOLDEN_TASK, work_dir / "tasks" / GOLDEN_TASK, golden_docs, count_tokens)]
    scores = {side: score_model(base_model_path, peft, suites, batch_size)
              for side, peft in (("base", None), ("tuned", adapter_dir))}
    rows = [MetricRow(suite.name, label, scores["base"][(suite.name, label)], scores["tuned"][(suite.name, label)],
                      higher_is_better)
            for suite in suites for _, label, _, higher_is_better in suite.metrics]
    report = EvalReport(base_model=base_model_path, adapter_dir=adapter_dir, n_holdout=len(docs), rows=rows,
                        n_golden=len(golden_docs), golden_set_digest=golden_digest)
    (work_dir / "eval_report.json").write_text(json.dumps(report.to_dict(), indent=2))
    return report
