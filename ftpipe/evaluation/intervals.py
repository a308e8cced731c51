"""Confidence intervals for evaluation metrics: a paired bootstrap over the evaluated examples.

A metric on a few dozen questions moves by one question's worth (2.3 points on 44 questions) when a CPU sums
in another order; a gate that compares the point value with a threshold flips on it. Resampling the examples
(the same resampled examples for the base and the tuned model, because both answered the same questions)
shows how far the metric could be from what a larger set of such questions would give, and a gate can decide
on that interval instead of the point.

The resampling is seeded, so a report's intervals are reproducible from its per-example scores.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

LEVEL = 0.95
ITERATIONS = 4000
SEED = 0
# Resampled index rows per chunk: bounds memory to about this many values per column (16 MB of int64).
_CHUNK_VALUES = 2_000_000

Statistic = Callable[[Mapping[str, np.ndarray]], np.ndarray]
"""Reduces columns of shape (..., n) along the last axis: a metric of one (re)sampled evaluation set."""


@dataclass(frozen=True)
class Estimate:
    """A metric's value on the evaluated examples and its ``LEVEL`` percentile-bootstrap interval."""

    value: float
    low: float
    high: float

    @classmethod
    def point(cls, value: float) -> "Estimate":
        """A value with no interval: reports written before per-example scores were kept."""
        return cls(value, value, value)

    def to_dict(self) -> dict:
        return {"value": self.value, "low": self.low, "high": self.high}

    @classmethod
    def from_dict(cls, data: dict) -> "Estimate":
        return cls(float(data["value"]), float(data["low"]), float(data["high"]))

    def map(self, f: Callable[[float], float]) -> "Estimate":
        """The estimate of ``f(metric)`` for a monotone non-decreasing ``f`` (its interval maps end to end)."""
        return Estimate(f(self.value), f(self.low), f(self.high))


def paired_bootstrap(columns: Mapping[str, np.ndarray | list], statistics: Mapping[str, Statistic],
                     iterations: int = ITERATIONS, level: float = LEVEL, seed: int = SEED) -> dict[str, Estimate]:
    """Each statistic on ``columns`` (equal-length per-example arrays) with its percentile interval.

    Every iteration draws one resample of the examples and evaluates every statistic on it, so statistics
    that combine columns (a tuned-minus-base difference) see the pairs kept together.
    """
    data = {name: np.asarray(values, dtype=np.float64) for name, values in columns.items()}
    sizes = {len(v) for v in data.values()}
    if len(sizes) != 1:
        raise ValueError(f"columns of different lengths: { {k: len(v) for k, v in data.items()} }")
    (n,) = sizes
    if n == 0:
        raise ValueError("no examples to estimate from")
    rng = np.random.default_rng(seed)
    draws: dict[str, list[np.ndarray]] = {name: [] for name in statistics}
    chunk = max(1, _CHUNK_VALUES // n)
    for start in range(0, iterations, chunk):
        index = rng.integers(0, n, size=(min(chunk, iterations - start), n))
        resampled = {name: values[index] for name, values in data.items()}
        for name, statistic in statistics.items():
            draws[name].append(np.asarray(statistic(resampled), dtype=np.float64))
    tail = (1 - level) / 2 * 100
    estimates = {}
    for name, statistic in statistics.items():
        values = np.concatenate(draws[name])
        low, high = np.percentile(values, [tail, 100 - tail])
        estimates[name] = Estimate(float(statistic(data)), float(low), float(high))
    return estimates
