"""Advice for an adapter that failed its quality gates, read off its training curve and its data report.

Each rule looks for one recognisable pattern and names a concrete change to the manifest or the data, with
the value to try. The rules are heuristics, so the advice says what was seen as well as what to change, and
a tenant can judge it.
"""

from __future__ import annotations

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
    if losses and first > 0 and last < MEMORISED * first and held_out_worse:
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
    if failed_names & {"golden_regression", "golden_exact_match", "golden_exact_match_delta"}:
        advice.append(f"General skills regressed (golden-set exact match down "
                      f"{metrics.get('golden_regression', 0.0):.1%}): lower the learning rate or the number of "
                      "epochs, or mix general conversations into the training data.")
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
