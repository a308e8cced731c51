"""The trainer process: ``python -m ftpipe.training.pipes_main``, launched by Dagster Pipes.

It receives the resolved ``TrainJobSpec`` as a Pipes extra, streams progress as Pipes log lines, and ends
with one custom message saying how it ended (``completed``, ``interrupted`` at a checkpoint, or a training
failure with its class and advice) so that the asset can fail the right way. On success the final metrics
and the loss curve become the adapter's materialization metadata.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from dagster_pipes import PipesContext, open_dagster_pipes

from ftpipe.training.failures import TrainingFailure
from ftpipe.training.interrupts import stop_on_signals_and_orphaning
from ftpipe.training.plots import as_markdown, plot_loss_curve
from ftpipe.training.progress_line import format_progress
from ftpipe.training.runner import COMPLETED, is_main_process, run_training, save_completed
from ftpipe.training.spec import TrainJobSpec
from ftpipe.training.validation import validation_metadata

# The trainer's first log line, once its stop handlers are set: from then on a stop signal ends training at a
# checkpoint instead of ending the process.
STOP_HANDLERS_SET = "training stops if process {} exits"


def _train(pipes: PipesContext) -> None:
    spec = TrainJobSpec.from_dict(pipes.get_extra("spec"))

    def sink(m: dict) -> None:
        pipes.log.info(format_progress(m))

    with stop_on_signals_and_orphaning() as stop:
        pipes.log.info(STOP_HANDLERS_SET.format(stop.watching))
        try:
            result = run_training(spec, sink, stop=stop, log=pipes.log.info)
        except TrainingFailure as failure:
            pipes.report_custom_message({"outcome": "failed", "error_class": failure.error_class,
                                         "message": failure.message, "advice": failure.advice})
            return
    pipes.report_custom_message({"outcome": result.outcome, "steps": result.steps,
                                 "max_steps": result.max_steps, "last_checkpoint": result.last_checkpoint,
                                 "stop_reason": result.stop_reason})
    if result.outcome != COMPLETED:
        return
    curve = plot_loss_curve(result.loss_history, Path(spec.output_dir) / "loss_curve.png",
                            eval_history=result.eval_history, chosen_step=result.selected_step)
    # The curve as numbers, for the advice a failed quality gate gets (ftpipe.evaluation.advice), and the
    # record that lets a later run of the same spec reuse this training.
    save_completed(spec, result)
    pipes.report_asset_materialization(
        metadata={
            "adapter_dir": {"raw_value": result.adapter_dir, "type": "path"},
            "steps": result.steps,
            "train_loss": float(f"{result.train_loss:.4g}"),
            "final_loss": float(f"{result.final_loss:.4g}"),
            "trained_tokens": result.trained_tokens,
            "train_seconds": float(f"{result.seconds:.3g}"),
            "tokens_per_second": float(f"{result.tokens_per_second:.3g}"),
            "resumed_from_step": int(Path(result.resumed_from).name.split("-")[1]) if result.resumed_from else 0,
            "micro_batch_size": result.micro_batch_size,
            "gradient_accumulation_steps": result.gradient_accumulation_steps,
            "oom_retries": result.oom_retries,
            **validation_metadata(dataclasses.asdict(result)),
            "loss_curve": {"raw_value": as_markdown(curve), "type": "md"},
        }
    )


def _train_other_rank() -> None:
    """Ranks 1..N-1 of a torchrun launch read the same spec but report nothing: one voice per trainer."""
    from dagster_pipes import PipesDefaultContextLoader, PipesEnvVarParamsLoader

    params = PipesEnvVarParamsLoader().load_context_params()
    with PipesDefaultContextLoader().load_context(params) as data:
        spec = TrainJobSpec.from_dict(data["extras"]["spec"])
    with stop_on_signals_and_orphaning() as stop:
        try:
            run_training(spec, stop=stop)
        except TrainingFailure:
            pass  # rank 0 took the same decision and reports it


def main() -> None:
    if not is_main_process():
        _train_other_rank()
        return
    with open_dagster_pipes() as pipes:
        _train(pipes)


if __name__ == "__main__":
    main()
