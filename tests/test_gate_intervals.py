"""Intervals for the evaluation's metrics and gates that decide on them: pure functions, no model."""

import json
import math

import numpy as np
import pytest

from ftpipe.evaluation.compare import EvalReport
from ftpipe.evaluation.gates import MET, MISSED, UNCERTAIN, evaluate_gates, gate_metrics, gates_markdown, parse_gates
from ftpipe.evaluation.intervals import Estimate, paired_bootstrap
from ftpipe.evaluation.scores import ModelScores, TaskSamples, task_estimates

PLATFORM_GATES = {"holdout_delta": "> 0", "golden_regression": "<= 0.1"}


def _golden(base_right: int, lost: int, n: int = 44, loglik_drop: float = 0.0) -> TaskSamples:
    """``n`` golden questions: the base answers the first ``base_right``, the tuned model loses ``lost`` of them."""
    base = [1.0] * base_right + [0.0] * (n - base_right)
    tuned = [0.0] * lost + base[lost:]
    base_ll = [-2.0 - 0.1 * (i % 7) for i in range(n)]
    return TaskSamples("golden", "exact_match", [5] * n, ModelScores(base, base_ll),
                       ModelScores(tuned, [ll - loglik_drop for ll in base_ll]))


def _holdout(n: int, base_right: int, tuned_right: int) -> TaskSamples:
    base = [1.0] * base_right + [0.0] * (n - base_right)
    tuned = [1.0] * tuned_right + [0.0] * (n - tuned_right)
    return TaskSamples("holdout", "exact_match", [8] * n, ModelScores(base, [-6.0] * n),
                       ModelScores(tuned, [-2.0 - (i % 3) for i in range(n)]))


def _report(*samples: TaskSamples) -> dict:
    return json.loads(json.dumps(EvalReport("base", "adapter", list(samples), "digest").to_dict()))


def _verdicts(report: dict, gates: dict[str, str] = PLATFORM_GATES) -> dict[str, tuple[str, bool]]:
    results = evaluate_gates(parse_gates(gates, "platform", "sft"), gate_metrics(report))
    return {r.gate.metric: (r.verdict, r.passed) for r in results}


def test_the_bootstrap_is_reproducible_and_matches_the_binomial_interval():
    rng = np.random.default_rng(7)
    outcomes = (rng.random(400) < 0.5).astype(float)
    stats = {"mean": lambda c: c["x"].mean(-1)}
    first, again = paired_bootstrap({"x": outcomes}, stats), paired_bootstrap({"x": outcomes}, stats)
    assert first == again  # seeded: a report's intervals can be recomputed from its per-example scores
    p = outcomes.mean()
    half_width = 1.96 * math.sqrt(p * (1 - p) / len(outcomes))  # the normal approximation, fine at n=400
    assert first["mean"].low == pytest.approx(p - half_width, abs=0.01)
    assert first["mean"].high == pytest.approx(p + half_width, abs=0.01)


def test_pairing_narrows_the_interval_of_a_change():
    # Both models answer mostly the same questions right: the change is small and known precisely, although
    # each model's own score is uncertain.
    samples = _golden(base_right=22, lost=2)
    estimates = task_estimates(samples)
    change, tuned = estimates["golden_exact_match_delta"], estimates["golden_exact_match"]
    assert change.high - change.low < (tuned.high - tuned.low) / 2
    assert change.value == pytest.approx(-2 / 44)
    assert change.low < change.value <= change.high <= 0.0  # never a gain: no question was won


def test_identical_models_have_no_change_and_a_perplexity_ratio_of_one():
    estimates = task_estimates(_golden(base_right=20, lost=0))
    assert estimates["golden_exact_match_delta"] == Estimate(0.0, 0.0, 0.0)
    assert estimates["golden_perplexity_ratio"] == Estimate(1.0, 1.0, 1.0)


def test_a_golden_gate_does_not_flip_on_one_question():
    # With a point comparison, losing 4 questions of 44 (0.091) passes "<= 0.1" and losing 5 (0.114) fails:
    # one question, or another CPU's rounding, decided. On the interval both are "uncertain" and pass.
    verdicts = {lost: _verdicts(_report(_holdout(40, 0, 30), _golden(30, lost)))["golden_regression"]
                for lost in (3, 4, 5, 6)}
    assert set(verdicts.values()) == {(UNCERTAIN, True)}, verdicts
    # A regression the evidence shows is above the tolerance still fails, and says how sure it is.
    (heavy,) = [r for r in evaluate_gates(parse_gates(PLATFORM_GATES, "platform", "sft"),
                                          gate_metrics(_report(_holdout(40, 0, 30), _golden(30, 16))))
                if r.gate.metric == "golden_regression"]
    assert heavy.verdict == MISSED and not heavy.passed and heavy.estimate.low > 0.1
    assert "misses `golden_regression <= 0.1` with 95% confidence" in heavy.how_sure()


def test_a_gain_on_the_held_out_set_must_be_shown():
    clear = _verdicts(_report(_holdout(40, 2, 30), _golden(30, 0)))
    assert clear["holdout_delta"] == (MET, True)
    # 2 more right of 12 could be luck: not significantly better than the base model, so not promoted.
    unclear = _verdicts(_report(_holdout(12, 2, 4), _golden(30, 0)))
    assert unclear["holdout_delta"] == (UNCERTAIN, False)
    results = evaluate_gates(parse_gates(PLATFORM_GATES, "platform", "sft"),
                             gate_metrics(_report(_holdout(12, 2, 4), _golden(30, 0))))
    text = gates_markdown(results)
    assert "must be shown with 95% confidence, so the gate fails" in text
    assert "benefit of the doubt" not in text  # the golden gate was met outright: nothing was lost


def test_the_perplexity_ratio_discriminates_where_exact_match_cannot():
    # The same exact-match answers, but the tuned model finds every golden answer 0.2 nats less likely: exact
    # match shows nothing, the answer perplexity ratio shows a clear loss with a tight interval.
    estimates = task_estimates(_golden(30, lost=0, loglik_drop=1.0))
    assert estimates["golden_exact_match_delta"] == Estimate(0.0, 0.0, 0.0)
    ratio = estimates["golden_perplexity_ratio"]
    assert ratio.value == pytest.approx(math.exp(1.0 / 5))
    assert 1.0 < ratio.low <= ratio.value <= ratio.high
    verdicts = _verdicts(_report(_holdout(40, 0, 30), _golden(30, 0, loglik_drop=1.0)),
                         {"golden_perplexity_ratio": "<= 1.1"})
    assert verdicts["golden_perplexity_ratio"] == (MISSED, False)


def test_the_report_keeps_per_example_scores_and_shows_intervals_in_words():
    report = EvalReport("base", "adapter", [_holdout(40, 2, 30), _golden(30, 3)], "digest")
    data = json.loads(json.dumps(report.to_dict()))
    again = EvalReport("base", "adapter", [TaskSamples(**s) for s in data["samples"]], "digest")
    assert again.estimates == report.estimates  # the intervals can be recomputed from the report alone
    assert data["n_holdout"] == 40 and data["n_golden"] == 44 and data["confidence_level"] == 0.95
    holdout, golden = report.summary()
    assert "a change of +0.700" in holdout and "significantly better" in holdout
    assert "no significant change" in golden and "a change of -0.068" in golden
    table = report.to_markdown()
    assert "| holdout | exact_match | 0.050 | 0.750 | +0.700 (" in table and "| golden | perplexity |" in table


def test_samples_of_different_lengths_are_refused():
    with pytest.raises(ValueError, match="different lengths"):
        TaskSamples("golden", "exact_match", [1, 2], ModelScores([1.0], [0.0]), ModelScores([1.0, 0.0], [0.0, 0.0]))
