"""Run lm-eval on the base model and on the tuned adapter, and compare them.

Two suites, each scored for both models: the tenant's held-out split (exact match, or preference accuracy
for a DPO adapter, and the perplexity of the reference answers) and the platform's golden set (exact match
and perplexity), which shows what the fine-tune cost the base model's general skills. Each model is loaded
once and runs both suites; the suites differ in their system instruction, which lm-eval sets per call.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from ftpipe.evaluation.golden import load_golden_set
from ftpipe.evaluation.holdout_task import (
    answer_docs,
    holdout_docs,
    preference_docs,
    write_holdout_task,
    write_perplexity_task,
    write_preference_task,
)
from ftpipe.evaluation.intervals import LEVEL, Estimate
from ftpipe.evaluation.scores import ModelScores, TaskSamples, task_estimates

HOLDOUT_TASK = "holdout"
GOLDEN_TASK = "golden"


@dataclass
class MetricRow:
    """One metric of one suite for both models, each side with its interval (``ftpipe.evaluation.intervals``)."""

    task: str
    metric: str
    base: Estimate
    tuned: Estimate
    delta: Estimate
    """Tuned minus base, resampled in pairs: narrower than the two sides' intervals suggest."""
    higher_is_better: bool = True

    @property
    def improved(self) -> bool:
        return self.delta.value > 0 if self.higher_is_better else self.delta.value < 0

    def to_dict(self) -> dict:
        return {"task": self.task, "metric": self.metric, "base": self.base.value, "tuned": self.tuned.value,
                "delta": self.delta.value, "higher_is_better": self.higher_is_better, "improved": self.improved,
                "intervals": {side: [e.low, e.high] for side, e in
                              (("base", self.base), ("tuned", self.tuned), ("delta", self.delta))}}


@dataclass
class EvalReport:
    base_model: str
    adapter_dir: str
    samples: list[TaskSamples]
    golden_set_digest: str = ""
    estimates: dict[str, Estimate] = field(init=False)
    """Every gate metric of every suite (``ftpipe.evaluation.scores.task_estimates``)."""

    def __post_init__(self) -> None:
        self.estimates = {k: v for s in self.samples for k, v in task_estimates(s).items()}

    def _suite(self, task: str) -> TaskSamples | None:
        return next((s for s in self.samples if s.task == task), None)

    @property
    def n_holdout(self) -> int:
        suite = self._suite(HOLDOUT_TASK)
        return suite.n if suite else 0

    @property
    def n_golden(self) -> int:
        suite = self._suite(GOLDEN_TASK)
        return suite.n if suite else 0

    @property
    def rows(self) -> list[MetricRow]:
        rows = []
        for s in self.samples:
            for metric, higher_is_better in ((s.score_metric, True), ("perplexity", False)):
                name = f"{s.task}_{metric}"
                rows.append(MetricRow(s.task, metric, self.estimates[f"{name}_base"], self.estimates[name],
                                      self.estimates[f"{name}_delta"], higher_is_better))
        return rows

    def metric(self, task: str, metric: str) -> MetricRow:
        return next(r for r in self.rows if r.task == task and r.metric == metric)

    def to_dict(self) -> dict:
        return {"base_model": self.base_model, "adapter_dir": self.adapter_dir, "n_holdout": self.n_holdout,
                "n_golden": self.n_golden, "golden_set_digest": self.golden_set_digest,
                "confidence_level": LEVEL, "summary": self.summary(), "rows": [r.to_dict() for r in self.rows],
                "estimates": {k: v.to_dict() for k, v in self.estimates.items()},
                "samples": [s.to_dict() for s in self.samples]}

    def summary(self) -> list[str]:
        """Each suite's result in words: what changed, and whether the interval says it changed at all."""
        lines = []
        for s in self.samples:
            delta, ratio = (self.estimates[f"{s.task}_{s.score_metric}_delta"],
                            self.estimates[f"{s.task}_perplexity_ratio"])
            where = "the held-out set" if s.task == HOLDOUT_TASK else "the golden set"
            score = s.score_metric.replace("_", " ")
            lines.append(
                f"On {where} ({s.n} examples) {score} went from "
                f"{self.estimates[f'{s.task}_{s.score_metric}_base'].value:.3f}"
                f" to {self.estimates[f'{s.task}_{s.score_metric}'].value:.3f}, a change of {delta.value:+.3f} "
                f"({LEVEL:.0%} interval {delta.low:+.3f} to {delta.high:+.3f}): "
                f"{_verdict(delta, 0.0, 'better', 'worse')}; "
                f"the reference answers' perplexity changed x{ratio.value:.3f} ({ratio.low:.3f} to {ratio.high:.3f}): "
                f"{_verdict(ratio, 1.0, 'likelier', 'less likely', higher_is_better=False)}.")
        return lines

    def to_markdown(self) -> str:
        """One row per metric; a score's change is tuned minus base, a perplexity's is tuned over base."""
        lines = [f"| task | metric | base | tuned | change ({LEVEL:.0%} interval) | better is |",
                 "|---|---|---:|---:|---|---|"]
        for r in self.rows:
            if r.metric == "perplexity":
                ratio = self.estimates[f"{r.task}_perplexity_ratio"]
                change = f"x{ratio.value:.3f} ({ratio.low:.3f} to {ratio.high:.3f})"
            else:
                change = f"{r.delta.value:+.3f} ({r.delta.low:+.3f} to {r.delta.high:+.3f})"
            lines.append(f"| {r.task} | {r.metric} | {r.base.value:.3f} | {r.tuned.value:.3f} | {change} | "
                         f"{'higher' if r.higher_is_better else 'lower'} |")
        return "\n".join(lines)


def _verdict(change: Estimate, none: float, better: str, worse: str, higher_is_better: bool = True) -> str:
    """Whether the interval of a change lies wholly on one side of no change."""
    if change.low <= none <= change.high:
        return "no significant change"
    up = change.low > none
    return f"significantly {better if up == higher_is_better else worse}"


@dataclass
class Suite:
    """A discrete task (exact match or preference accuracy) and the answer log-likelihood task over the same
    examples, in the same order, scored under one system instruction."""

    name: str
    task_dir: Path
    system: str
    score_metric: str
    """``exact_match`` or ``preference_accuracy``: what the report calls the discrete task's score."""
    score_key: str
    """The per-example field lm-eval logs for it."""
    n_tokens: list[int]

    @property
    def loglik_task(self) -> str:
        return f"{self.name}_perplexity"


def write_suite(name: str, task_dir: Path, docs: list[dict], count_tokens) -> Suite:
    """A generation or preference task over ``docs`` and the perplexity of their reference answers."""
    if "choices" in docs[0]:
        system = write_preference_task(task_dir, name, docs)
        metric, key = "preference_accuracy", "acc"
    else:
        system = write_holdout_task(task_dir, name, docs)
        metric, key = "exact_match", "exact_match"
    answers = answer_docs(docs)
    n_tokens = [count_tokens(d["answer"]) for d in answers]
    write_perplexity_task(task_dir, f"{name}_perplexity", answers, n_tokens)
    return Suite(name, task_dir, system, metric, key, n_tokens)


def run_suite(lm, suite: Suite) -> ModelScores:
    """One model's per-example results on the suite."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    logging.getLogger("lm-eval").setLevel(logging.WARNING)
    samples = lm_eval.simple_evaluate(
        model=lm,
        tasks=[suite.name, suite.loglik_task],
        task_manager=TaskManager(include_path=str(suite.task_dir), include_defaults=False),
        apply_chat_template=True,
        system_instruction=suite.system or None,
        # The intervals come from the paired bootstrap over both models (ftpipe.evaluation.intervals).
        bootstrap_iters=0,
        log_samples=True,
    )["samples"]

    def per_doc(task: str, key: str) -> list:
        return [s[key] for s in sorted(samples[task], key=lambda s: s["doc_id"])]

    return ModelScores(score=[float(v) for v in per_doc(suite.name, suite.score_key)],
                       loglik=[float(ll) for ll, _ in per_doc(suite.loglik_task, "perplexity")])


def answer_token_counter(base_model_path: str):
    """Counts tokens of a reference answer as the base model's tokenizer does, for per-token perplexity."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base_model_path)
    return lambda text: len(tokenizer(text, add_special_tokens=False).input_ids)


def score_model(base_model_path: str, peft: str | None, suites: list[Suite],
                batch_size: int = 16) -> dict[str, ModelScores]:
    """One model, the base or the base with an adapter, loaded once and scored on every suite. Every
    evaluation loads models here, so that the nightly re-evaluation scores exactly as registration did."""
    import torch
    from lm_eval.models.huggingface import HFLM

    device = "cuda" if torch.cuda.is_available() else "cpu"
    lm = HFLM(pretrained=base_model_path, peft=peft, dtype="float32", device=device, batch_size=batch_size)
    return {suite.name: run_suite(lm, suite) for suite in suites}


def paired(suite: Suite, base: ModelScores, tuned: ModelScores) -> TaskSamples:
    return TaskSamples(suite.name, suite.score_metric, suite.n_tokens, base, tuned)


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
    base = score_model(base_model_path, None, suites, batch_size)
    tuned = score_model(base_model_path, adapter_dir, suites, batch_size)
    report = EvalReport(base_model=base_model_path, adapter_dir=adapter_dir,
                        samples=[paired(s, base[s.name], tuned[s.name]) for s in suites],
                        golden_set_digest=golden_digest)
    (work_dir / "eval_report.json").write_text(json.dumps(report.to_dict(), indent=2))
    return report
