"""The pre-flight: the tokenized dataset, exactly as training will see it, checked before any GPU time.

Errors (blocking): examples longer than ``max_seq_len`` after rendering through the base model's template.
Warnings: examples with nothing to learn (empty label mask), and examples whose assistant turns never end in
the EOS token, so that the model would never learn to stop. Statistics: token percentiles, trainable tokens,
training tokens × epochs, and the estimated GPU-hours and cost on the job's pool.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import polars as pl

from ftpipe.data.quality import DataWarning, rows_warning
from ftpipe.data.schema import MAX_KEPT_ERRORS, RowError
from ftpipe.tenants import PoolConfig
from ftpipe.training.cost import estimate_cost

PREFLIGHT_WARNING_KINDS = ("empty_label_mask", "no_eos")


@dataclass
class Preflight:
    stats: dict
    errors: list[RowError] = field(default_factory=list)
    """The first ``MAX_KEPT_ERRORS`` examples too long for ``max_seq_len``; ``n_errors`` counts them all."""
    warnings: list[DataWarning] = field(default_factory=list)
    plan: list[dict] = field(default_factory=list)
    """The training plan's hyperparameters and where each came from (``ftpipe.training.plan``)."""

    @property
    def n_errors(self) -> int:
        return self.stats["too_long"]

    @property
    def passed(self) -> bool:
        return not self.n_errors


def run_preflight(tokenized: pl.DataFrame, max_len: int, epochs: float, num_parameters: int,
                  pool_name: str, pool: PoolConfig) -> Preflight:
    tokens = tokenized["n_tokens"]
    too_long = tokenized.filter(pl.col("n_tokens") > max_len).sort("source_file", "line")
    errors = [RowError(f, n, "messages", f"{t} tokens after the chat template; max_seq_len is {max_len}")
              for f, n, t in too_long.head(MAX_KEPT_ERRORS).select("source_file", "line", "n_tokens").iter_rows()]

    warnings = []
    empty = tokenized.filter(pl.col("n_trainable") == 0).sort("source_file", "line")
    if not empty.is_empty():
        warnings.append(rows_warning("empty_label_mask", "examples with no trainable tokens (nothing to learn)", empty))
    no_eos = tokenized.filter((pl.col("n_trainable") > 0) & ~pl.col("learns_eos")).sort("source_file", "line")
    if not no_eos.is_empty():
        warnings.append(rows_warning("no_eos", "assistant turns that never end in the EOS token (the model would "
                                     "not learn to stop)", no_eos))

    step_tokens = int(tokens.clip(upper_bound=max_len).sum()) if tokenized.height else 0
    train_tokens = int(step_tokens * epochs)
    cost = estimate_cost(num_parameters, train_tokens, pool_name, pool.peak_tflops, pool.mfu, pool.gpus_per_slot,
                         pool.price_per_gpu_hour)
    stats = {
        "examples": tokenized.height,
        "tokens_p50": int(tokens.quantile(0.5, "nearest") or 0),
        "tokens_p95": int(tokens.quantile(0.95, "nearest") or 0),
        "tokens_max": int(tokens.max() or 0),  # type: ignore[arg-type]  # polars: max() is any literal; ints here
        "too_long": too_long.height,
        "trainable_tokens": int(tokenized["n_trainable"].sum()),
        "tokens_per_epoch": step_tokens,
        "epochs": epochs,
        "train_tokens_x_epochs": train_tokens,
        "pool": pool_name,
        "estimated_gpu_hours": float(f"{cost.gpu_hours:.3g}"),
        "estimated_cost": float(f"{cost.cost:.3g}"),
    }
    return Preflight(stats, errors, warnings)


def preflight_dict(result: Preflight) -> dict:
    return {"passed": result.passed, "stats": result.stats, "errors": [asdict(e) for e in result.errors],
            "warnings": [asdict(w) for w in result.warnings], "plan": result.plan}
