"""The loss curve as a small PNG, for the adapter's materialization and the tenant's report."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from pathlib import Path


def curve_series(history: list[tuple[int, float]], eval_history: Sequence[tuple[int, float]] = (),
                 chosen_step: int | None = None) -> dict[str, list[tuple[float, ...]]]:
    """What the plot draws: ``training`` and ``validation`` as (step, loss), and ``chosen``, the evaluation of
    the step whose weights the adapter holds (empty when that step was not evaluated)."""
    chosen = dict(eval_history).get(chosen_step) if chosen_step is not None else None
    return {"training": [tuple(p) for p in history], "validation": [tuple(p) for p in eval_history],
            "chosen": [] if chosen is None or chosen_step is None else [(chosen_step, chosen)]}


def plot_loss_curve(history: list[tuple[int, float]], path: str | Path, title: str | None = None,
                    eval_history: Sequence[tuple[int, float]] = (), chosen_step: int | None = None) -> Path:
    """The training loss and, on the same axes, the validation loss, with the step whose weights the adapter
    holds marked (``chosen_step``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = curve_series(history, eval_history, chosen_step)
    fig, ax = plt.subplots(figsize=(4.5, 2.8), dpi=80)
    if series["training"]:
        ax.plot(*zip(*series["training"]), marker=".", linewidth=1, label="training")
    if series["validation"]:
        ax.plot(*zip(*series["validation"]), marker="o", markersize=3, linewidth=1, label="validation")
    for step, loss in series["chosen"]:
        ax.axvline(step, color="grey", linestyle=":", linewidth=1)
        ax.plot([step], [loss], marker="*", markersize=10, color="tab:red", linestyle="none",
                label=f"adapter (step {step})")
    if series["validation"]:
        ax.legend(fontsize=7)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(title or ("training and validation loss" if series["validation"] else "training loss"),
                 fontsize=10)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Path(path)


def curve_from_record(record: dict, path: str | Path) -> Path:
    """The curve of a finished training from its record (``runner.save_completed``)."""
    return plot_loss_curve([tuple(p) for p in record.get("loss_history", [])], path,
                           eval_history=[tuple(p) for p in record.get("eval_history", [])],
                           chosen_step=record.get("selected_step"))


def as_markdown(png: str | Path) -> str:
    """The image inline, as the Dagster UI shows markdown metadata."""
    return f"![loss curve](data:image/png;base64,{base64.b64encode(Path(png).read_bytes()).decode()})"
