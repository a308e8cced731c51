"""Quality gates: conditions on the evaluation that an adapter must meet to be promoted.

A gate is a metric name and a comparison, written as in a manifest::

    quality_gates:
      holdout_exact_match: ">= 0.6"
      golden_regression: "<= 0.01"

The platform's defaults (``quality_gates`` in the platform configuration) always apply; a manifest adds its
own on top and cannot loosen them, because every gate must pass.

Metric names, from the evaluation report (``ftpipe.evaluation.compare``):

- ``{task}_{metric}``: the tuned model's score, e.g. ``holdout_exact_match``, ``golden_perplexity``;
  ``{task}_{metric}_base`` the base model's, ``{task}_{metric}_delta`` tuned minus base;
- ``holdout_score`` / ``holdout_delta``: the held-out set's main metric (exact match for SFT, preference
  accuracy for DPO) and its gain over the base model;
- ``{task}_perplexity_ratio``: the tuned model's answer perplexity over the base model's (1 for no change,
  1.2 for answers 20% less likely per token); on the golden set it moves smoothly where exact match jumps;
- ``golden_regression``: how much golden-set exact match the fine-tune lost (0 when it lost none).

Every metric comes with a 95% interval from a paired bootstrap over the evaluated examples
(``ftpipe.evaluation.intervals``), and a gate decides on the interval, not on the point: it is *met* or
*missed* when the whole interval is on one side of its threshold. An interval that straddles the threshold
is *uncertain*, and the gate's kind decides: a gate on the tenant's held-out set guards a claimed gain, so
an uncertain one fails ("not significantly better than the base model"); a gate on the golden set guards
against harm, so an uncertain one passes ("regression not significantly above the tolerance"). One question
more or less, or another CPU's rounding, no longer flips a gate that the evidence does not decide.
"""

from __future__ import annotations

import math
import operator
import re
from dataclasses import asdict, dataclass

from ftpipe.evaluation.intervals import LEVEL, Estimate

_OPERATORS = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt, "==": operator.eq}
_EXPRESSION = re.compile(r"\s*(>=|<=|==|>|<)\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*")

_TASK_METRICS = {"sft": {"holdout": ("exact_match", "perplexity")},
                 "dpo": {"holdout": ("preference_accuracy", "perplexity")}}
_GOLDEN_METRICS = ("exact_match", "perplexity")


class GateError(ValueError):
    pass


def gate_metric_names(objective: str) -> list[str]:
    """Every metric a gate may name for a job with this objective."""
    pairs = [("holdout", m) for m in _TASK_METRICS[objective]["holdout"]] + [("golden", m) for m in _GOLDEN_METRICS]
    names = [f"{task}_{metric}{suffix}" for task, metric in pairs for suffix in ("", "_base", "_delta")]
    ratios = [f"{task}_perplexity_ratio" for task in ("holdout", "golden")]
    return sorted(names + ratios + ["holdout_score", "holdout_delta", "golden_regression"])


@dataclass(frozen=True)
class Gate:
    metric: str
    op: str
    threshold: float
    source: str = "manifest"

    def __str__(self) -> str:
        return f"{self.metric} {self.op} {self.threshold:g}"

    @property
    def needs_proof(self) -> bool:
        """Whether an uncertain verdict fails. A gate on the tenant's held-out set guards a claimed gain, which
        must be shown; a gate on the golden set guards against harm, which must be shown to fail the adapter."""
        return not self.metric.startswith("golden_")


def parse_gate(metric: str, expression: str, source: str = "manifest", objective: str | None = None) -> Gate:
    match = _EXPRESSION.fullmatch(str(expression))
    if not match:
        raise GateError(f"gate '{metric}': {expression!r} is not a comparison such as '>= 0.6' "
                        f"(operators: {', '.join(_OPERATORS)})")
    known = (gate_metric_names(objective) if objective
             else sorted(set(gate_metric_names("sft") + gate_metric_names("dpo"))))
    if metric not in known:
        raise GateError(f"gate '{metric}': unknown metric" + (f" for objective '{objective}'" if objective else "")
                        + f"; known: {', '.join(known)}")
    gate = Gate(metric, match.group(1), float(match.group(2)), source)
    low, high = metric_range(metric)
    passable = low <= gate.threshold <= high if gate.op == "==" else any(
        _OPERATORS[gate.op](end, gate.threshold) for end in (low, high))  # an inequality met anywhere is met at an end
    if not math.isfinite(gate.threshold) or not passable:  # the job would train for nothing
        raise GateError(f"gate '{metric}': {expression!r} can never pass ({metric} lies between {low:g} and "
                        f"{high:g})")
    return gate


def metric_range(metric: str) -> tuple[float, float]:
    """The values a gate metric can take: scores are shares, perplexity is at least 1, deltas are differences."""
    perplexity = "perplexity" in metric
    if metric.endswith("_perplexity_ratio"):
        return (0.0, math.inf)
    if metric.endswith("_delta"):
        return (-math.inf, math.inf) if perplexity else (-1.0, 1.0)
    return (1.0, math.inf) if perplexity else (0.0, 1.0)


def parse_gates(gates: dict[str, str], source: str, objective: str | None = None) -> list[Gate]:
    return [parse_gate(metric, expression, source, objective) for metric, expression in gates.items()]


def gate_metrics(report: dict) -> dict[str, Estimate]:
    """The named values gates compare, each with its interval, from an evaluation report's dict
    (``EvalReport.to_dict()``). A report written before intervals were kept gives point values."""
    if "estimates" in report:
        values = {name: Estimate.from_dict(e) for name, e in report["estimates"].items()}
    else:
        values = {}
        for row in report["rows"]:
            name = f"{row['task']}_{row['metric']}"
            for suffix, side in (("", "tuned"), ("_base", "base"), ("_delta", "delta")):
                values[name + suffix] = Estimate.point(row[side])
    primary = next((r for r in report["rows"] if r["task"] == "holdout"), None)
    if primary is not None:  # the first held-out row is the set's main metric
        name = f"holdout_{primary['metric']}"
        values["holdout_score"], values["holdout_delta"] = values[name], values[f"{name}_delta"]
    return with_derived_metrics(values)


def with_derived_metrics(values: dict[str, Estimate]) -> dict[str, Estimate]:
    """``values`` and the metrics computed from them: ``golden_regression``, the golden exact match lost."""
    values = dict(values)
    if "golden_exact_match_delta" in values:
        lost = values["golden_exact_match_delta"]  # a loss is a negative change: its interval ends swap
        values["golden_regression"] = Estimate(max(0.0, -lost.value), max(0.0, -lost.high), max(0.0, -lost.low))
    return values


MET, MISSED, UNCERTAIN = "met", "missed", "uncertain"


@dataclass
class GateResult:
    gate: Gate
    estimate: Estimate
    verdict: str
    """``met`` or ``missed`` when the whole interval is on one side of the threshold, else ``uncertain``."""

    @property
    def value(self) -> float:
        return self.estimate.value

    @property
    def passed(self) -> bool:
        return self.verdict == MET or (self.verdict == UNCERTAIN and not self.gate.needs_proof)

    def how_sure(self) -> str:
        """The verdict in words, with the interval it rests on."""
        e, level = self.estimate, f"{LEVEL:.0%}"
        shown = f"{self.gate.metric} is {e.value:.3g} ({level} interval {e.low:.3g} to {e.high:.3g})"
        if self.verdict == MET:
            return f"{shown}: meets `{self.gate}` with {level} confidence"
        if self.verdict == MISSED:
            return f"{shown}: misses `{self.gate}` with {level} confidence"
        if self.gate.needs_proof:
            return (f"{shown}: may meet `{self.gate}` or not; a gain on the tenant's task must be shown with "
                    f"{level} confidence, so the gate fails (more held-out examples narrow the interval)")
        return (f"{shown}: not shown to miss `{self.gate}` with {level} confidence; the gate passes with the "
                "benefit of the doubt")

    def to_dict(self) -> dict:
        return {**asdict(self.gate), "value": self.value, "low": self.estimate.low, "high": self.estimate.high,
                "verdict": self.verdict, "passed": self.passed, "condition": str(self.gate),
                "how_sure": self.how_sure()}


def evaluate_gates(gates: list[Gate], metrics: dict[str, Estimate]) -> list[GateResult]:
    results = []
    for gate in gates:
        if gate.metric not in metrics:
            raise GateError(f"gate {gate}: the evaluation has no metric '{gate.metric}'")
        estimate = metrics[gate.metric]
        compare = _OPERATORS[gate.op]
        met_at = [bool(compare(end, gate.threshold)) for end in (estimate.low, estimate.high)]
        # An inequality holds on the whole interval when it holds at both ends; == only on a point interval.
        verdict = MET if all(met_at) else MISSED if not any(met_at) else UNCERTAIN
        results.append(GateResult(gate, estimate, verdict))
    return results


def gates_markdown(results: list[GateResult]) -> str:
    lines = [f"| gate | from | value | {LEVEL:.0%} interval | verdict | passed |", "|---|---|---:|---|---|---|"]
    lines += [f"| `{r.gate}` | {r.gate.source} | {r.value:.4g} | {r.estimate.low:.4g} to {r.estimate.high:.4g} | "
              f"{r.verdict} | {'yes' if r.passed else '**no**'} |" for r in results]
    lines += ["", *(f"- {r.how_sure()}" for r in results)]
    return "\n".join(lines)
