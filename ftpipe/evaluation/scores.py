"""Per-example scores of the base and the tuned model on one evaluation suite, and the metrics gates read.

Each suite is scored per example by two measures: a discrete one (exact match of the generated answer, or
whether the chosen answer of a preference pair is preferred) and a continuous one, the log-likelihood of the
reference answer. The discrete one is what a tenant understands; the continuous one still discriminates on a
set of a few dozen questions, where one flipped answer moves exact match by several points: the perplexity
ratio (the tuned model's answer perplexity over the base model's, 1.0 for no change) moves smoothly.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import cast

import numpy as np

from ftpipe.evaluation.intervals import Estimate, paired_bootstrap


@dataclass
class ModelScores:
    """One model's per-example results on a suite, in the suite's example order."""

    score: list[float]
    """1.0 where the example was answered right (exact match, chosen answer preferred), else 0.0."""
    loglik: list[float]
    """The reference answer's log-likelihood in nats, given its prompt."""


@dataclass
class TaskSamples:
    """Both models' per-example results on one suite, paired example by example."""

    task: str
    score_metric: str
    """What ``score`` measures: ``exact_match`` or ``preference_accuracy``."""
    n_tokens: list[int]
    """Tokens of each reference answer: perplexity is per token over the whole set."""
    base: ModelScores
    tuned: ModelScores

    def __post_init__(self) -> None:
        if isinstance(self.base, dict):  # read back from a report's JSON: dicts in fields typed for what they become
            self.base, self.tuned = ModelScores(**cast(dict, self.base)), ModelScores(**cast(dict, self.tuned))
        sizes = {len(self.n_tokens), len(self.base.score), len(self.base.loglik), len(self.tuned.score),
                 len(self.tuned.loglik)}
        if len(sizes) != 1:
            raise ValueError(f"{self.task}: per-example results of different lengths")

    @property
    def n(self) -> int:
        return len(self.n_tokens)

    def to_dict(self) -> dict:
        return asdict(self)


def _perplexity(loglik: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # a model that cannot say the answer at all has an infinite perplexity
        return np.exp(-loglik.sum(-1) / tokens.sum(-1))


def task_estimates(samples: TaskSamples) -> dict[str, Estimate]:
    """Every metric of the suite with its interval, named as gates name them (``ftpipe.evaluation.gates``):
    ``{task}_{metric}`` for the tuned model, ``_base``, ``_delta`` (tuned minus base), and
    ``{task}_perplexity_ratio`` (tuned over base; below 1 the tuned model finds the answers likelier)."""
    t, m = samples.task, samples.score_metric
    columns: dict[str, list] = {"base": samples.base.score, "tuned": samples.tuned.score,
                                "base_ll": samples.base.loglik, "tuned_ll": samples.tuned.loglik,
                                "tokens": samples.n_tokens}
    statistics = {
        f"{t}_{m}": lambda c: c["tuned"].mean(-1),
        f"{t}_{m}_base": lambda c: c["base"].mean(-1),
        f"{t}_{m}_delta": lambda c: (c["tuned"] - c["base"]).mean(-1),
        f"{t}_perplexity": lambda c: _perplexity(c["tuned_ll"], c["tokens"]),
        f"{t}_perplexity_base": lambda c: _perplexity(c["base_ll"], c["tokens"]),
        f"{t}_perplexity_delta": lambda c: (_perplexity(c["tuned_ll"], c["tokens"])
                                            - _perplexity(c["base_ll"], c["tokens"])),
        f"{t}_perplexity_ratio": lambda c: _perplexity(c["tuned_ll"] - c["base_ll"], c["tokens"]),
    }
    return paired_bootstrap(columns, statistics)
