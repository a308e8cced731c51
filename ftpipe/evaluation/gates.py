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
- ``golden_regression``: how much golden-set exact match the fine-tune lost (0 when it lost none).
"""

from __future__ import annotations

import math
import operator
import re
from dataclasses import asdict, dataclass

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
    return sorted(names + ["holdout_score", "holdout_delta", "golden_regression"])


@dataclass(frozen=True)
class Gate:
    metric: str
    op: str
    threshold: float
    source: str = "manifest"

    def __str__(self) -> str:
        return f"{self.metric} {self.op} {self.threshold:g}"


@dataclass
class GateResult:
    gate: Gate
    value: float
    passed: bool

    def to_dict(self) -> dict:
        return {**asdict(self.gate), "value": self.value, "passed": self.passed, "condition": str(self.gate)}


def parse_gate(metric: str, expression: str, source: str = "manifest", objective: str | None = None) -> Gate:
    match = _EXPRESSION.fullmatch(str(expression))
    if not match:
        raise GateError(f"gate '{metric}': {expression!r} is not a comparison such as '>= 0.6' "
                        f"(operators: {', '.join(_OPERATORS)})")
    known = gate_metric_names(objective) if objective else sorted(set(gate_metric_names("sft") + gate_metric_names("dpo")))
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
    if metric.endswith("_delta"):
        return (-math.inf, math.inf) if perplexity else (-1.0, 1.0)
    return (1.0, math.inf) if perplexity else (0.0, 1.0)


def parse_gates(gates: dict[str, str], source: str, objective: str | None = None) -> list[Gate]:
    return [parse_gate(metric, expression, source, objective) for metric, expression in gates.items()]


def gate_metrics(rows: list[dict]) -> dict[str, float]:
    """The named values gates compare, from an evaluation report's rows (its ``to_dict()['rows']``)."""
    values: dict[str, float] = {}
    for row in rows:
        name = f"{row['task']}_{row['metric']}"
        values[name], values[f"{name}_base"], values[f"{name}_delta"] = row["tuned"], row["base"], row["delta"]
    primary = next((r for r in rows if r["task"] == "holdout"), None)
    if primary is not None:  # the first held-out row is the set's main metric
        values["holdout_score"], values["holdout_delta"] = primary["tuned"], primary["delta"]
    golden = next((r for r in rows if r["task"] == "golden" and r["metric"] == "exact_match"), None)
    if golden is not None:
        values["golden_regression"] = max(0.0, golden["base"] - golden["tuned"])
    return values


def evaluate_gates(gates: list[Gate], metrics: dict[str, float]) -> list[GateResult]:
    results = []
    for gate in gates:
        if gate.metric not in metrics:
            raise GateError(f"gate {gate}: the evaluation has no metric '{gate.metric}'")
        value = metrics[gate.metric]
        results.append(GateResult(gate, value, bool(_OPERATORS[gate.op](value, gate.threshold))))
    return results


def gates_markdown(results: list[GateResult]) -> str:
    lines = ["| gate | from | value | passed |", "|---|---|---:|---|"]
    lines += [f"| `{r.gate}` | {r.gate.source} | {r.value:.4g} | {'yes' if r.passed else '**no**'} |" for r in results]
    return "\n".join(lines)
