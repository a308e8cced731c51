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

EXACT_MATCH = (GOLDEN_TASK, "exact_match")
PERPLEXITY = (GOLDEN_TASK, "perplexity")


@dataclass(frozen=True)
class GoldenScores:
    exact_match: float
    perplexity: float


def golden_scores(base_model_path: str, adapter_dirs: dict[str, str], work_dir: str | Path,
                  golden_set: str | Path | None = None, batch_size: int = 16) -> tuple[GoldenScores,
                                                                                       dict[str, GoldenScores], str]:
    """(base model's scores, each adapter's scores, golden-set digest), each model loaded once, exactly as
    the registration-time evaluation scores them."""
    docs, digest = load_golden_set(golden_set)
    suite = write_suite(GOLDEN_TASK, Path(work_dir) / "tasks" / GOLDEN_TASK, docs,
                        answer_token_counter(base_model_path))

    def score(peft: str | None) -> GoldenScores:
        values = score_model(base_model_path, peft, [suite], batch_size)
        return GoldenScores(values[EXACT_MATCH], values[PERPLEXITY])

    return score(None), {adapter_id: score(path) for adapter_id, path in adapter_dirs.items()}, digest


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
    findings: list[str] = field(default_factory=list)

    @property
    def holds_up(self) -> bool:
        return not self.findings

    def to_dict(self) -> dict:
        return {**asdict(self), "holds_up": self.holds_up}


def compare_with_registration(adapter_id: str, tenant: str, base_model: str, registered_metrics: dict,
                              registered_base_digest: str, base_digest_now: str, base: GoldenScores,
                              tuned: GoldenScores, platform_gates: dict[str, str],
                              tolerance: float) -> Reevaluation:
    """The re-evaluation of one adapter: the platform's golden-set gates on today's scores, and any move of
    more than ``tolerance`` in exact match since registration, for the adapter or its base model."""
    rows = [{"task": GOLDEN_TASK, "metric": "exact_match", "base": base.exact_match, "tuned": tuned.exact_match,
             "delta": tuned.exact_match - base.exact_match}]
    metrics = gate_metrics(rows)
    findings = []
    if registered_base_digest != base_digest_now:
        findings.append(f"the base model {base_model} changed since registration (version "
                        f"{registered_base_digest[:12]} then, {base_digest_now[:12]} now)")
    golden_gates = [g for g in parse_gates(platform_gates, "platform") if g.metric in metrics]
    findings += [f"platform gate {r.gate} fails now (value {r.value:.4g})"
                 for r in evaluate_gates(golden_gates, metrics) if not r.passed]
    registered = {"tuned": registered_metrics.get("golden_exact_match_tuned"),
                  "base": registered_metrics.get("golden_exact_match_base")}
    for side, now in (("tuned", tuned.exact_match), ("base", base.exact_match)):
        then = registered[side]
        if then is not None and abs(now - then) > tolerance:
            who = "the adapter's" if side == "tuned" else "the base model's"
            findings.append(f"{who} golden exact match moved from {then:.3f} at registration to {now:.3f}")
    return Reevaluation(adapter_id, tenant, base_model, base.exact_match, tuned.exact_match, tuned.perplexity,
                        registered["tuned"], metrics["golden_regression"], findings)


def reevaluation_markdown(results: list[Reevaluation], golden_digest: str) -> str:
    lines = [f"Golden set `{golden_digest[:12]}`.", "",
             "| adapter | tenant | base EM | tuned EM | registered EM | regression | holds up |",
             "|---|---|---:|---:|---:|---:|---|"]
    for r in results:
        registered = f"{r.registered_exact_match_tuned:.3f}" if r.registered_exact_match_tuned is not None else "-"
        lines.append(f"| {r.adapter_id} | {r.tenant} | {r.exact_match_base:.3f} | {r.exact_match_tuned:.3f} | "
                     f"{registered} | {r.regression:.3f} | {'yes' if r.holds_up else '**no**'} |")
    problems = [f"- {r.adapter_id}: {finding}" for r in results for finding in r.findings]
    return "\n".join(lines + ([""] + problems if problems else []))
