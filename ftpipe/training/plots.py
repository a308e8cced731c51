"""The loss curve as a small PNG, for the adapter's materialization and the tenant's report."""

from __future__ import annotations

from pathlib import Path


def plot_loss_curve(history: list[tuple[int, float]], path: str | Path, title: str = "training loss") -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.5, 2.8), dpi=80)
    if history:
        steps, losses = zip(*history)
        ax.plot(steps, losses, marker=".", linewidth=1)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Path(path)
