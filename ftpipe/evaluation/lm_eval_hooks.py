"""Metric hooks that lm-eval task files written by ``holdout_task`` call through ``!function``."""

from __future__ import annotations


def answer_perplexity(doc: dict, results: list[tuple[float, bool]]) -> dict:
    """(log-likelihood, tokens) per answer; lm-eval's ``weighted_perplexity`` turns them into exp(-sum/sum)."""
    loglikelihood, _is_greedy = results[0]
    return {"perplexity": (loglikelihood, doc["n_tokens"])}
