"""The validation loss during training: on the held-out split, every ``eval_steps``, read back as a curve.

The held-out split is tokenized with the train split (``ftpipe.data.pipeline.tokenize_to_parquet``) and scored by
the Trainer's own evaluation loop, so the number is the training loss's twin: the same masks, the same
objective (the DPO loss for DPO jobs). Its history lives in the Trainer's ``log_history``, which every checkpoint
carries in ``trainer_state.json``: a resumed run knows every evaluation before it, and so the best so far and
how long ago it was, without a file of its own. ``ftpipe.training.callbacks.BestAdapter`` keeps the weights of
the best evaluation and stops early; these are the pure rules it and the advice share.
"""

from __future__ import annotations

import math

AUTO_EVALUATIONS = 10
"""Evaluations per run when ``eval_steps`` is 0 (automatic)."""
EVAL_MAX_EXAMPLES = 1000
"""The held-out examples scored at each evaluation, a fixed sample of a larger split: each evaluation then costs
a bounded forward pass, not a share of an epoch."""


def eval_history(log_history: list[dict]) -> list[tuple[int, float]]:
    """Every (step, eval_loss) the Trainer logged, in order."""
    return [(int(e["step"]), float(e["eval_loss"])) for e in log_history if "eval_loss" in e]


def best_of(history: list[tuple[int, float]]) -> tuple[int, float] | None:
    """The earliest evaluation with the lowest finite loss; None before any."""
    finite = [(loss, step) for step, loss in history if math.isfinite(loss)]
    if not finite:
        return None
    loss, step = min(finite)  # ties go to the earlier step: the same loss for fewer steps
    return step, loss


def best_as_of(history: list[tuple[int, float]], step: int) -> tuple[int, float] | None:
    """The best evaluation a checkpoint taken at ``step`` knew of."""
    return best_of([(s, loss) for s, loss in history if s <= step])


def evals_since_best(history: list[tuple[int, float]]) -> int:
    """Evaluations after the best one: what early stopping's patience counts."""
    best = best_of(history)
    return len(history) if best is None else sum(1 for step, _ in history if step > best[0])


def evaluation_args(spec, evaluating: bool) -> dict:
    """The Trainer's evaluation arguments. ``eval_steps`` 0 becomes a share of the run (transformers takes a
    value below 1 as that share of ``max_steps``), so the run's own step count decides, packing included."""
    if not evaluating:
        return {"eval_strategy": "no"}
    return {
        "eval_strategy": "steps",
        "eval_steps": spec.eval_steps or 1 / AUTO_EVALUATIONS,
        "per_device_eval_batch_size": spec.micro_batch_size,
        "prediction_loss_only": True,  # the loss only: no logits gathered over the whole held-out set
    }


def read_eval_table(path: str, columns: list[str]):
    """The held-out rows to score, or None: at most ``EVAL_MAX_EXAMPLES``, and only rows with a token to score
    (a batch whose every label is masked has a loss of 0/0, and one NaN makes the mean NaN)."""
    import polars as pl

    if not path:
        return None
    table = pl.read_parquet(path, columns=columns)
    if "assistant_masks" in columns:
        table = table.filter(pl.col("assistant_masks").list.sum() > 0)
    else:  # preference pairs: the chosen answer is what the loss scores
        table = table.filter(pl.col("chosen_ids").list.len() > 0)
    if table.height > EVAL_MAX_EXAMPLES:  # a sample, not the head: a file sorted by topic would bias the head
        table = table.sample(n=EVAL_MAX_EXAMPLES, seed=0)
    return table if table.height else None


def validation_metadata(record: dict) -> dict:
    """The validation loss of a finished training (a ``TrainResult`` as a dict, or its saved record) as
    materialization metadata: the same keys whether the training ran or was reused, so the UI plots them
    across runs. Without a held-out split there is no validation loss, only what the adapter is."""
    metadata = {"checkpoint_selection": record.get("checkpoint_selection", "last"),
                "selected_step": record.get("selected_step", record.get("steps", 0)),
                "early_stopped": bool(record.get("early_stopped", False))}
    history = record.get("eval_history") or []
    if history:
        metadata.update(eval_loss=float(f"{history[-1][1]:.4g}"), evaluations=len(history))
    if record.get("best_step") is not None:
        metadata.update(best_step=record["best_step"], best_eval_loss=float(f"{record['best_eval_loss']:.4g}"))
    return metadata
