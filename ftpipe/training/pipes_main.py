"""The trainer process: ``python -m ftpipe.training.pipes_main``, launched by Dagster Pipes.

It receives the resolved ``TrainJobSpec`` as a Pipes extra, streams progress as Pipes log lines, and reports
the final metrics and the loss curve as the adapter's materialization metadata.
"""

from __future__ import annotations

import base64
from pathlib import Path

from dagster_pipes import PipesContext, open_dagster_pipes

from ftpipe.training.plots import plot_loss_curve
from ftpipe.training.sft import run_sft
from ftpipe.training.spec import TrainJobSpec


def _train(pipes: PipesContext) -> None:
    spec = TrainJobSpec.from_dict(pipes.get_extra("spec"))

    def sink(m: dict) -> None:
        pipes.log.info(
            f"step {m['step']}/{m['max_steps']} loss={m['loss']:.4f} lr={m['learning_rate']:.2e} "
            f"grad_norm={m['grad_norm']:.3f} tokens/s={m['tokens_per_second']:.0f}"
        )

    result = run_sft(spec, sink)
    curve = plot_loss_curve(result.loss_history, Path(spec.output_dir) / "loss_curve.png")
    curve_b64 = base64.b64encode(curve.read_bytes()).decode()
    pipes.report_asset_materialization(
        metadata={
            "adapter_dir": {"raw_value": result.adapter_dir, "type": "path"},
            "steps": result.steps,
            "train_loss": result.train_loss,
            "final_loss": result.final_loss,
            "trained_tokens": result.trained_tokens,
            "train_seconds": result.seconds,
            "tokens_per_second": result.tokens_per_second,
            "loss_curve": {"raw_value": f"![loss curve](data:image/png;base64,{curve_b64})", "type": "md"},
        }
    )


def main() -> None:
    with open_dagster_pipes() as pipes:
        _train(pipes)


if __name__ == "__main__":
    main()
