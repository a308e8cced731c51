"""Before any GPU time: how long a job will take on a pool, and what it will cost.

Training costs about 6 FLOPs per parameter per token (forward and backward; adapters still back-propagate
through the frozen base). Divided by what a pool delivers (peak FLOP/s × the utilization it reaches), that
gives GPU-seconds; a pool's price per GPU-hour gives the cost.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

FLOPS_PER_PARAM_TOKEN = 6.0


@dataclass(frozen=True)
class CostEstimate:
    pool: str
    gpu_hours: float
    cost: float
    wall_hours: float


def estimate_cost(num_parameters: int, train_tokens: int, pool_name: str, peak_tflops: float, mfu: float,
                  gpus: int, price_per_gpu_hour: float) -> CostEstimate:
    flops = FLOPS_PER_PARAM_TOKEN * num_parameters * train_tokens
    wall_seconds = flops / (gpus * peak_tflops * 1e12 * mfu)
    gpu_hours = wall_seconds * gpus / 3600
    return CostEstimate(pool_name, gpu_hours, gpu_hours * price_per_gpu_hour, wall_seconds / 3600)


RUNTIME_HEADROOM = 4.0
RUNTIME_GRACE_SECONDS = 900.0
"""A job may run this many times its estimated wall time, plus loading and saving, before it is stopped: the
estimate assumes the pool's typical utilization, and a job that runs four times past it is a runaway."""


def runtime_limit_seconds(expected_wall_seconds: float) -> float:
    return round(expected_wall_seconds * RUNTIME_HEADROOM + RUNTIME_GRACE_SECONDS)


def calibrated_seconds(estimated_seconds: float, runs: Sequence[tuple[float, float]]) -> float:
    """The FLOP-based estimate corrected by what a pool really delivers, from its recent trainings' pairs
    (measured over FLOP-estimated training time, seconds of the trainer process outside training); the
    estimate itself when the pool has none yet.

    A ratio, not seconds per token or per step, carries over between base models and batch shapes (6 FLOPs
    per parameter per token). The startup (imports, loading the model) is added apart: it does not grow with
    the tokens, and on a small job it is most of the time. Medians, so that one run on a noisy node does not
    move the estimate.
    """
    usable = [(r, o) for r, o in runs if math.isfinite(r) and r > 0 and math.isfinite(o) and o >= 0]
    if not usable:
        return estimated_seconds
    return statistics.median(o for _, o in usable) + estimated_seconds * statistics.median(r for r, _ in usable)
