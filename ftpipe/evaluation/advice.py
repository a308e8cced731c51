"""Advice for an adapter that failed its quality gates, read off its training curve and its data report.

Each rule looks for one recognisable pattern and names a concrete change to the manifest or the data, with
the value to try. The rules are heuristics, so the advice says what was seen as well as what to change, and
a tenant can judge it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ftpipe.evaluation.gates import GateResult

# A loss curve whose last quarter still falls by more than this share of its total drop has not converged.
STILL_FALLING = 0.15
# Training loss below this share of its start while the held-out perplexity got worse: memorisation.
MEMORISED = 0.25
# Loss that ends above this share of its start has hardly moved.
BARELY_MOVED = 0.8
# A late loss this many times its minimum is a spike: the learning rate is too high.
SPIKE = 1.5
# A validation loss that ends this share above its minimum, while the training loss fell after it: overfitting.
OVERFIT_RISE = 0.1
# Data warnings that touch more than this share of the training examples are worth fixing first.
NOTABLE_SHARE = 0.05
FEW_EXAMPLES = 200


@dataclass
class TrainingSummary:
    loss_history: list[tuple[int, float]]
    epochs: float
    learning_rate: float
    lora_r: int | None
    method: str
    n_train: int
    data_warnings: dict[str, int] = field(default_factory=dict)
    eval_history: list[tuple[int, float]] = field(default_factory=list)
    """The validation loss during training, (step, loss); empty when the job had none."""
    checkpoint_selection: str = "last"
    """Which weights the adapter holds: ``best`` (the lowest validation loss) or ``last``."""
    max_steps: int = 0
    """The optimizer steps ``epochs`` make (an early-stopped run ran fewer); 0: the last evaluated step."""

    @classmethod
    def from_record(cls, training: dict, spec: dict, n_train: int,
                    data_warnings: dict[str, int] | None = None) -> "TrainingSummary":
        """From a finished training's record (``ftpipe.training.runner.save_completed``) and its spec."""
        return cls(loss_history=[tuple(p) for p in training["loss_history"]], epochs=spec["epochs"],
                   learning_rate=spec["learning_rate"], lora_r=spec.get("lora_r"), method=spec["method"],
                   n_train=n_train, data_warnings=data_warnings or {},
                   eval_history=[tuple(p) for p in training.get("eval_history", [])],
                   checkpoint_selection=training.get("checkpoint_selection", "last"),
                   max_steps=training.get("max_steps", 0))


def advise(failed: list[GateResult], metrics: dict[str, float], training: TrainingSummary) -> list[str]:
    if not failed:
        return []
    advice: list[str] = []
    losses = [loss for _, loss in training.loss_history]
    first, last, lowest = (losses[0], losses[-1], min(losses)) if losses else (0.0, 0.0, 0.0)
    held_out_worse = metrics.get("holdout_perplexity_delta", 0.0) > 0
    failed_names = {r.gate.metric for r in failed}

    if losses and lowest > 0 and max(losses[losses.index(lowest):]) > SPIKE * lowest:
        advice.append(f"The training loss spiked after reaching {lowest:.3f} (up to "
                      f"{max(losses[losses.index(lowest):]):.3f}): lower the learning rate, e.g. "
                      f"hyperparameters.learning_rate: {training.learning_rate / 2:.1e}.")
    overfit = _overfitting(training)
    if overfit:
        advice.append(overfit)
    elif losses and first > 0 and last < MEMORISED * first and held_out_worse:
        advice.append(f"The training loss fell to {last / first:.0%} of its start while the held-out perplexity "
                      f"got worse: the model memorised the training set. Train fewer epochs (e.g. epochs: "
                      f"{max(1.0, training.epochs / 2):g}), lower the learning rate, or add more varied examples.")
    elif len(losses) >= 4 and first > last:
        quarter = losses[-(len(losses) // 4 + 1):]
        if quarter[0] - quarter[-1] > STILL_FALLING * (first - last):
            advice.append(f"The training loss was still falling at the end ({quarter[0]:.3f} -> {quarter[-1]:.3f} "
                          f"over the last quarter): train longer, e.g. epochs: {training.epochs * 2:g}.")
    if losses and first > 0 and last > BARELY_MOVED * first:
        change = (f"a higher rank, e.g. lora_r: {training.lora_r * 2}" if training.lora_r
                  else "a higher learning rate")
        advice.append(f"The training loss hardly moved ({first:.3f} -> {last:.3f}): try {change}, or a higher "
                      f"learning rate than {training.learning_rate:.1e}.")
    if any(name.startswith("golden_") for name in failed_names):
        ratio = metrics.get("golden_perplexity_ratio")
        advice.append(f"General skills regressed (golden-set exact match down "
                      f"{metrics.get('golden_regression', 0.0):.1%}"
                      + (f", its answers x{ratio:.2f} as perplexing" if ratio is not None else "")
                      + "): lower the learning rate or the number of epochs, or mix general conversations into "
                      "the training data.")
    if training.n_train < FEW_EXAMPLES:
        advice.append(f"Only {training.n_train} training examples: more examples (a few hundred at least) usually "
                      "help more than any setting.")
    for kind, count in sorted(training.data_warnings.items()):
        if count and count > NOTABLE_SHARE * max(training.n_train, 1):
            advice.append(f"The data report warns of {count} {kind.replace('_', ' ')}: fix these examples "
                          "(the validation report lists their lines).")
    if not advice:
        advice.append("Nothing in the training curve or the data explains the result: check that the held-out "
                      "examples ask what the training examples teach, and compare the samples in the eval report.")
    return advice


def _overfitting(training: TrainingSummary) -> str | None:
    """The validation loss rose clearly after its minimum while the training loss kept falling: the model
    learned its training examples rather than the task after that step. Advice names the step, the epochs that
    stop there, and early stopping."""
    history = [(step, loss) for step, loss in training.eval_history if math.isfinite(loss)]
    if len(history) < 3:
        return None
    best_step, best_loss = min(history, key=lambda p: (p[1], p[0]))
    last_step, last_loss = history[-1]
    if best_step == last_step or best_loss <= 0 or last_loss < (1 + OVERFIT_RISE) * best_loss:
        return None
    train_at_best = [loss for step, loss in training.loss_history if step <= best_step]
    train_after = [loss for step, loss in training.loss_history if step > best_step]
    if not train_at_best or not train_after or train_after[-1] >= train_at_best[-1]:
        return None  # both rose: a learning-rate problem (the spike rule), not overfitting
    epochs = float(f"{max(0.1, training.epochs * best_step / (training.max_steps or last_step)):.2g}")
    kept = (f" The adapter holds the step-{best_step} weights (checkpoint_selection: best); training past it only "
            "cost time." if training.checkpoint_selection == "best" else "")
    return (f"The validation loss was lowest at step {best_step} ({best_loss:.3f}) and rose to {last_loss:.3f} by step "
            f"{last_step} while the training loss kept falling ({train_at_best[-1]:.3f} -> {train_after[-1]:.3f}): "
            f"the model overfit after step {best_step}. Stop there: epochs: {epochs:g}, or "
            f"early_stopping_patience: 2 to stop once the validation loss stops improving; more varied examples "
            f"let it train longer.{kept}")
