"""Quality gates and the advice a failing adapter gets: pure functions, no Dagster, no model."""

import pytest

from ftpipe.evaluation.advice import TrainingSummary, advise
from ftpipe.evaluation.gates import GateError, evaluate_gates, gate_metrics, parse_gate, parse_gates
from ftpipe.evaluation.intervals import Estimate
from ftpipe.manifest import ManifestError, parse_manifest
from ftpipe.tenants import PlatformConfig

ROWS = [
    {"task": "holdout", "metric": "exact_match", "base": 0.0, "tuned": 0.7, "delta": 0.7},
    {"task": "holdout", "metric": "perplexity", "base": 1.3, "tuned": 1.1, "delta": -0.2},
    {"task": "golden", "metric": "exact_match", "base": 0.5, "tuned": 0.45, "delta": -0.05},
    {"task": "golden", "metric": "perplexity", "base": 1.9, "tuned": 2.0, "delta": 0.1},
]


def _point_values(rows) -> dict[str, float]:
    """A report without per-example scores (written before intervals were kept) gives point values."""
    metrics = gate_metrics({"rows": rows})
    assert all(e.low == e.value == e.high for e in metrics.values())
    return {name: e.value for name, e in metrics.items()}


def test_metrics_include_aliases_and_the_golden_regression():
    metrics = _point_values(ROWS)
    assert metrics["holdout_score"] == 0.7 and metrics["holdout_delta"] == 0.7
    assert metrics["holdout_exact_match_base"] == 0.0 and metrics["golden_perplexity_delta"] == 0.1
    assert metrics["golden_regression"] == pytest.approx(0.05)
    improved_golden = [dict(r, tuned=0.6, delta=0.1) if r["task"] == "golden" and r["metric"] == "exact_match"
                       else r for r in ROWS]
    assert _point_values(improved_golden)["golden_regression"] == 0.0  # a gain is no regression


def test_gates_pass_and_fail_on_their_thresholds():
    gates = parse_gates({"holdout_exact_match": ">= 0.6", "golden_regression": "<= 0.01",
                         "holdout_perplexity": "< 1.2"}, source="manifest", objective="sft")
    results = {str(r.gate): r.passed for r in evaluate_gates(gates, gate_metrics({"rows": ROWS}))}
    assert results == {"holdout_exact_match >= 0.6": True, "golden_regression <= 0.01": False,
                       "holdout_perplexity < 1.2": True}
    (strict,) = evaluate_gates([parse_gate("holdout_exact_match", ">=0.75")], gate_metrics({"rows": ROWS}))
    assert not strict.passed and strict.value == 0.7


@pytest.mark.parametrize("metric,expression,message", [
    ("holdout_exact_match", "at least 0.6", "is not a comparison such as '>= 0.6'"),
    ("holdout_exact_match", ">= 0.6.1", "is not a comparison"),
    ("holdout_acuracy", ">= 0.6", "unknown metric"),
])
def test_malformed_gates_are_refused_with_the_gate_named(metric, expression, message):
    with pytest.raises(GateError, match=message) as exc:
        parse_gate(metric, expression)
    assert f"gate '{metric}'" in str(exc.value)


def test_a_manifest_gate_on_a_metric_its_objective_has_not_is_refused_at_the_edge():
    text = "base_model: m\ndataset: d.jsonl\nobjective: dpo\nquality_gates:\n  holdout_exact_match: '>= 0.6'\n"
    with pytest.raises(ManifestError) as exc:
        parse_manifest(text)
    assert "field 'quality_gates'" in str(exc.value) and "unknown metric for objective 'dpo'" in str(exc.value)
    ok = parse_manifest(text.replace("holdout_exact_match", "holdout_preference_accuracy"))
    assert ok.quality_gates == {"holdout_preference_accuracy": ">= 0.6"}


def test_platform_defaults_apply_and_are_validated():
    base = {"pools": {"p": {"gpu": "cpu", "gpu_memory_gb": 8, "peak_tflops": 1}}, "default_pool": "p",
            "tiers": {"free": {"priority": 0}}}
    assert PlatformConfig.model_validate(base).evaluation.quality_gates["holdout_delta"] == "> 0"
    with pytest.raises(ValueError, match="gate 'nonsense': unknown metric"):
        PlatformConfig.model_validate({**base, "evaluation": {"quality_gates": {"nonsense": "> 1"}}})


def _training(history, **kw):
    defaults = dict(epochs=2.0, learning_rate=2e-4, lora_r=8, method="lora", n_train=1000, data_warnings={})
    return TrainingSummary(loss_history=list(enumerate(history)), **{**defaults, **kw})


def _failed(metrics: dict[str, float]):
    points = {name: Estimate.point(value) for name, value in metrics.items()}
    return [r for r in evaluate_gates([parse_gate("holdout_delta", "> 0.5")], points) if not r.passed]


def test_advice_reads_the_curve_and_the_data():
    flat = _point_values([dict(ROWS[0], tuned=0.1, delta=0.1)] + ROWS[1:])
    still_falling = advise(_failed(flat), flat, _training([3.0, 2.6, 2.2, 1.9, 1.6, 1.3, 1.0, 0.8]))
    assert any("still falling" in a and "epochs: 4" in a for a in still_falling)

    overfit = {**flat, "holdout_perplexity_delta": 0.4}
    memorised = advise(_failed(overfit), overfit, _training([3.0, 1.0, 0.4, 0.2, 0.1, 0.1, 0.1, 0.1]))
    assert any("memorised" in a and "epochs: 1" in a for a in memorised)

    stuck = advise(_failed(flat), flat, _training([3.0, 2.95, 2.9, 2.9]))
    assert any("hardly moved" in a and "lora_r: 16" in a for a in stuck)

    spiky = advise(_failed(flat), flat, _training([3.0, 1.0, 0.8, 2.5, 2.4]))
    assert any("spiked" in a and "learning_rate: 1.0e-04" in a for a in spiky)

    dirty = advise(_failed(flat), flat, _training([3.0, 1.5, 1.2, 1.1], n_train=120,
                                                  data_warnings={"exact_duplicates": 40, "pii": 1}))
    assert any("Only 120 training examples" in a for a in dirty)
    assert any("40 exact duplicates" in a for a in dirty) and not any(" pii" in a for a in dirty)


def test_no_advice_when_every_gate_passed():
    metrics = gate_metrics({"rows": ROWS})
    passed = evaluate_gates([parse_gate("holdout_delta", "> 0")], metrics)
    assert advise([r for r in passed if not r.passed], _point_values(ROWS), _training([3.0, 1.0])) == []


def test_a_failed_golden_gate_advises_against_forgetting():
    metrics = _point_values(ROWS)  # golden exact match fell 0.05
    failed = [r for r in evaluate_gates([parse_gate("golden_regression", "<= 0.01")], gate_metrics({"rows": ROWS}))
              if not r.passed]
    advice = advise(failed, metrics, _training([3.0, 1.5, 1.2, 1.1]))
    assert any("General skills regressed" in a and "5.0%" in a for a in advice)
    passed_golden = advise(_failed(metrics | {"holdout_delta": 0.1}), metrics, _training([3.0, 1.5, 1.2, 1.1]))
    assert not any("General skills" in a for a in passed_golden)  # only a failed golden gate brings it up


def test_a_failed_continuous_golden_gate_also_advises_against_forgetting():
    # Exact match held (no regression shown) but the golden answers became far less likely: still forgetting.
    metrics = {**_point_values(ROWS), "golden_regression": 0.0, "golden_perplexity_ratio": 4.0}
    failed = [r for r in evaluate_gates([parse_gate("golden_perplexity_ratio", "<= 1.5")],
                                        {"golden_perplexity_ratio": Estimate(4.0, 3.5, 4.6)}) if not r.passed]
    advice = advise(failed, metrics, _training([3.0, 1.5, 1.2, 1.1]))
    assert any("General skills regressed" in a and "x4.00 as perplexing" in a for a in advice)
