"""Nightly re-evaluation of promoted adapters on the golden set, and what changed since registration.

A promoted adapter keeps being served while the world under it moves: the base model's files are pulled
again (a new revision behind the same id), a serving image brings new kernels, the golden set is replaced.
Scoring every promoted adapter and its base model again on the golden set, and comparing with the scores
recorded at registration, shows when an adapter no longer holds up. Findings are reported to the operator;
nothing is demoted automatically, because taking a tenant's adapter out of service is a human decision.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from ftpipe.evaluation.compare import GOLDEN_TASK, answer_token_counter, score_model, write_suite
from ftpipe.evaluation.gates import evaluate_gates, gate_metrics, parse_gates
from ftpipe.evaluation.golden import load_golden_set
from ftpipe.evaluation.scores import ModelScores, TaskSamples, task_estimates


@dataclass
class GoldenRun:
    """The base model's and each adapter's per-example golden-set results, scored in one process."""

    digest: str
    n_tokens: list[int]
    base: ModelScores
    adapters: dict[str, ModelScores]

    def samples(self, adapter_id: str) -> TaskSamples:
        return TaskSamples(GOLDEN_TASK, "exact_match", self.n_tokens, self.base, self.adapters[adapter_id])

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "GoldenRun":
        return cls(data["digest"], data["n_tokens"], ModelScores(**data["base"]),
                   {k: ModelScores(**v) for k, v in data["adapters"].items()})


def golden_scores(base_model_path: str, adapter_dirs: dict[str, str], work_dir: str | Path,
                  golden_set: str | Path | None = None, batch_size: int = 16) -> GoldenRun:
    """Each model loaded once and scored exactly as the registration-time evaluation scores it."""
    docs, digest = load_golden_set(golden_set)
    suite = write_suite(GOLDEN_TASK, Path(work_dir) / "tasks" / GOLDEN_TASK, docs,
                        answer_token_counter(base_model_path))

    def score(peft: str | None) -> ModelScores:
        return score_model(base_model_path, peft, [suite], batch_size)[GOLDEN_TASK]

    base = score(None)
    return GoldenRun(digest, suite.n_tokens, base,
                     {adapter_id: score(path) for adapter_id, path in adapter_dirs.items()})


@dataclass
class Reevaluation:
    adapter_id: str
    tenant: str
    base_model: str
    exact_match_base: float
    exact_match_tuned: float
    perplexity_tuned: float
    registered_exact_match_tuned: float | None
    regression: float
    regression_interval: tuple[float, float] = (0.0, 0.0)
    findings: list[str] = field(default_factory=list)

    @property
    def holds_up(self) -> bool:
        return not self.findings

    def to_dict(self) -> dict:
        return {**asdict(self), "holds_up": self.holds_up}


def compare_with_registration(adapter_id: str, tenant: str, base_model: str, registered_metrics: dict,
                              registered_base_digest: str, base_digest_now: str, samples: TaskSamples,
                              platform_gates: dict[str, str], tolerance: float) -> Reevaluation:
    """The re-evaluation of one adapter: the platform's golden-set gates on today's scores (decided on their
    intervals, as at registration), and any move of more than ``tolerance`` in exact match since
    registration, for the adapter or its base model."""
    estimates = task_estimates(samples)
    metrics = gate_metrics({"rows": [], "estimates": {k: v.to_dict() for k, v in estimates.items()}})
    findings = []
    if registered_base_digest != base_digest_now:
        findings.append(f"the base model {base_model} changed since registration (version "
                        f"{registered_base_digest[:12]} then, {base_digest_now[:12]} now)")
    golden_gates = [g for g in parse_gates(platform_gates, "platform") if g.metric in metrics]
    findings += [f"platform gate {r.gate} fails now: {r.how_sure()}"
                 for r in evaluate_gates(golden_gates, metrics) if not r.passed]
    registered = {"tuned": registered_metrics.get("golden_exact_match_tuned"),
                  "base": registered_metrics.get("golden_exact_match_base")}
    now = {"tuned": metrics["golden_exact_match"].value, "base": metrics["golden_exact_match_base"].value}
    for side in ("tuned", "base"):
        then = registered[side]
        if then is not None and abs(now[side] - then) > tolerance:
            who = "the adapter's" if side == "tuned" else "the base model's"
            findings.append(f"{who} golden exact match moved from {then:.3f} at registration to {now[side]:.3f}")
    regression = metrics["golden_regression"]
    return Reevaluation(adapter_id, tenant, base_model, now["base"], now["tuned"],
                        metrics["golden_perplexity"].value, registered["tuned"], regression.value,
                        (regression.low, regression.high), findings)
