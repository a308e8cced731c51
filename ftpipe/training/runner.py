"""Run one training job, SFT or DPO, on the pre-tokenized dataset, resumable at any step.

The objective only decides which TRL trainer is built (``ftpipe.training.sft`` / ``ftpipe.training.dpo``);
everything around it is shared. One call trains a job to the end or to a clean stop:
- it resumes from the newest valid checkpoint under ``output_dir/checkpoints`` (a retried run finds it
  without any change of config, because the directory is derived from the resolved spec);
- checkpoints are committed atomically every ``save_steps`` and every ``save_minutes``;
- a stop request (signal, orphaned process) saves a checkpoint at the next step and returns
  ``outcome="interrupted"``;
- a job that runs past ``max_runtime_seconds`` commits a checkpoint at the next step and raises
  ``TimeLimitExceeded``, the tenant's failure: a runaway job stops holding a GPU by itself;
- a NaN/inf loss raises ``TrainingDiverged`` with advice; out of memory is retried once with half the
  micro-batch and twice the accumulation, the same effective batch;
- with a held-out split (``eval_file``), the validation loss is measured every ``eval_steps``; the adapter is
  the weights of the lowest one (``checkpoint_selection: best``) or the last, and training may stop early
  after ``early_stopping_patience`` evaluations without improvement (``callbacks.BestAdapter``).
"""

from __future__ import annotations

import dataclasses
import gc
import json
import math
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from ftpipe.training import checkpoints
from ftpipe.training.failures import OutOfMemory, TimeLimitExceeded, TrainingDiverged
from ftpipe.training.interrupts import StopRequest, stop_after
from ftpipe.training.spec import TrainJobSpec
from ftpipe.training.validation import best_of, eval_history

if TYPE_CHECKING:  # imported where used: they import torch and transformers
    from ftpipe.training.callbacks import BestAdapter, CheckpointSchedule, CommitCheckpoints, Divergence, LossWindow

MetricsSink = Callable[[dict], None]
Log = Callable[[str], None]

COMPLETED = "completed"
INTERRUPTED = "interrupted"


TRAINING_RESULT = "training_result.json"
"""Beside the adapter in the output directory: the loss curve as numbers, and the proof that the training of
exactly this spec completed (``save_completed`` / ``completed_training``)."""

@dataclass
class TrainResult:
    outcome: str
    """``completed``, or ``interrupted`` when a stop request ended it early at a committed checkpoint."""
    adapter_dir: str | None
    steps: int
    max_steps: int
    train_loss: float
    final_loss: float
    trained_tokens: int
    seconds: float
    tokens_per_second: float
    loss_history: list[tuple[int, float]]
    """Every logged (step, loss) of the job, across the attempts it was resumed from."""
    resumed_from: str | None
    last_checkpoint: str | None
    micro_batch_size: int
    gradient_accumulation_steps: int
    oom_retries: int
    stop_reason: str | None = None
    eval_history: list[tuple[int, float]] = dataclasses.field(default_factory=list)
    """Every (step, validation loss), across the attempts it was resumed from; empty without a held-out split."""
    best_step: int | None = None
    best_eval_loss: float | None = None
    checkpoint_selection: str = "last"
    """What the adapter is: ``best`` (the weights of ``best_step``) or ``last``, as it was done, not asked for."""
    selected_step: int = 0
    """The step whose weights the adapter holds."""
    early_stopped: bool = False
    """Stopped before ``max_steps`` because the validation loss stopped improving: a completed training."""


def run_training(spec: TrainJobSpec, sink: MetricsSink = lambda m: None, *, stop: StopRequest | None = None,
                 log: Log = lambda message: None, extra_callbacks: Sequence = ()) -> TrainResult:
    stop = stop or StopRequest()
    with stop_after(stop, spec.max_runtime_seconds, TIME_LIMIT_REASON):
        result = _run_with_retries(spec, sink, stop, log, extra_callbacks)
    if result.outcome == INTERRUPTED and result.stop_reason == TIME_LIMIT_REASON:
        raise TimeLimitExceeded.at(result.steps, result.max_steps, spec.max_runtime_seconds, result.last_checkpoint)
    return result


TIME_LIMIT_REASON = "time limit"


def _run_with_retries(spec: TrainJobSpec, sink: MetricsSink, stop: StopRequest, log: Log,
                      extra_callbacks: Sequence) -> TrainResult:
    area = checkpoints.CheckpointArea(Path(spec.output_dir) / "checkpoints")
    main_process = is_main_process()
    if main_process:
        area.reset_staging()
    attempt = spec
    oom_retries = 0
    while True:
        resume = checkpoints.latest_valid(area, log, set_aside=main_process)
        try:
            result = _train(attempt, area, resume, sink, stop, log, extra_callbacks)
        except Exception as exc:  # noqa: BLE001 - only out-of-memory is retried; everything else re-raises
            if not _is_out_of_memory(exc):
                raise
            _release_memory()
            if oom_retries or attempt.micro_batch_size == 1:
                raise _out_of_memory(attempt, spec) from exc
            attempt = dataclasses.replace(attempt, micro_batch_size=attempt.micro_batch_size // 2,
                                          gradient_accumulation_steps=attempt.gradient_accumulation_steps * 2)
            oom_retries += 1
            log(f"out of memory; retrying with micro_batch_size={attempt.micro_batch_size} and "
                f"gradient_accumulation_steps={attempt.gradient_accumulation_steps} (same effective batch)")
            continue
        result.oom_retries = oom_retries
        return result


def _train(spec: TrainJobSpec, area: checkpoints.CheckpointArea, resume: Path | None, sink: MetricsSink,
           stop: StopRequest | None, log: Log, extra_callbacks: Sequence) -> TrainResult:
    """One attempt: the TRL trainer of the objective, the platform's callbacks around it, trained to the end or
    to a stop, and what it did, measured."""
    from transformers import AutoTokenizer, PrinterCallback

    from ftpipe.training.callbacks import MetricsToSink
    from ftpipe.training.methods import load_base_model, peft_config

    tokenizer = AutoTokenizer.from_pretrained(spec.base_model_path)
    model = load_base_model(spec.base_model_path, spec.method, spec.qlora_compute_dtype)
    watch = _Watchers.around(spec, area, resume, stop, log)
    trainer, tokens_per_step = _trainer_builder(spec.objective)(
        spec, model, tokenizer, _training_arguments(spec, area), [*extra_callbacks, *watch.callbacks()],
        peft_config(spec.method, spec.lora_r, spec.lora_alpha, spec.lora_dropout, spec.target_modules))
    watch.attach(trainer)
    trainer.add_callback(MetricsToSink(sink, tokens_per_step))
    trainer.remove_callback(PrinterCallback)  # the sink reports progress; raw log dicts on stdout are noise
    if resume is not None:
        log(f"resuming from {resume.name}")
    start = time.monotonic()
    output = trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    seconds = time.monotonic() - start
    if watch.divergence.step is not None:  # divergence.happened, in a form the type checker follows
        raise TrainingDiverged.at(watch.divergence.step, watch.divergence.detail, spec.learning_rate,
                                  spec.tenant_overrides)
    measured = _measured(spec, trainer.state, float(output.training_loss), resume, watch, tokens_per_step, seconds)
    stopped_early = watch.best.stopped_early_at is not None  # finished, even when a stop came at that step
    if watch.schedule.stopped_at is not None and trainer.state.global_step < trainer.state.max_steps \
            and not stopped_early:
        return TrainResult(outcome=INTERRUPTED, adapter_dir=None, stop_reason=stop.reason if stop else None,
                           **measured)
    return _completed(spec, trainer, tokenizer, watch, measured, stopped_early, log)


def _training_arguments(spec: TrainJobSpec, area: checkpoints.CheckpointArea) -> dict:
    """The arguments every objective's TRL config shares (``SFTConfig`` / ``DPOConfig``)."""
    import torch

    on_gpu = torch.cuda.is_available()
    return dict(
        output_dir=str(area.staging),  # committed out of staging by CommitCheckpoints
        learning_rate=spec.learning_rate,
        num_train_epochs=spec.epochs,
        max_steps=spec.max_steps,
        per_device_train_batch_size=spec.micro_batch_size,
        gradient_accumulation_steps=spec.gradient_accumulation_steps,
        max_length=spec.max_seq_len,
        warmup_steps=spec.warmup_ratio,
        lr_scheduler_type="cosine",
        seed=spec.seed,
        logging_steps=spec.logging_steps,
        logging_nan_inf_filter=False,  # a NaN step must show as NaN, not as loss 0.0
        save_strategy="steps",
        save_steps=spec.save_steps,
        save_total_limit=None,  # CommitCheckpoints keeps the newest keep_checkpoints *valid* ones
        report_to=[],
        use_cpu=not on_gpu,
        bf16=on_gpu and torch.cuda.is_bf16_supported(),
        activation_checkpointing=spec.activation_checkpointing,
        ddp_find_unused_parameters=False,  # every LoRA weight takes part in every forward
        dataloader_num_workers=0,
        disable_tqdm=not spec.progress_bar,
        **_sharding(spec),
    )


@dataclass
class _Watchers:
    """The platform's callbacks on a training: divergence, checkpoints on a clock and on stop requests, the
    loss window kept across resumes, the best adapter (and early stopping), and the atomic commits."""
    divergence: Divergence
    schedule: CheckpointSchedule
    window: LossWindow
    best: BestAdapter
    committer: CommitCheckpoints

    @classmethod
    def around(cls, spec: TrainJobSpec, area: checkpoints.CheckpointArea, resume: Path | None,
               stop: StopRequest | None, log: Log) -> _Watchers:
        from ftpipe.training.callbacks import (
            BestAdapter,
            CheckpointSchedule,
            CommitCheckpoints,
            Divergence,
            LossWindow,
        )

        divergence = Divergence()
        return cls(divergence=divergence, schedule=CheckpointSchedule(spec.save_minutes, stop),
                   window=LossWindow(resume, log),
                   best=BestAdapter(Path(spec.output_dir) / "best", area, spec.checkpoint_selection == "best",
                                    spec.early_stopping_patience, log),
                   committer=CommitCheckpoints(area, spec.keep_checkpoints, divergence, log))

    def callbacks(self) -> list:
        from ftpipe.training.callbacks import DivergenceGuard

        # In this order: the loss window writes into a checkpoint before the committer seals it.
        return [DivergenceGuard(self.divergence), self.schedule, self.window, self.best, self.committer]

    def attach(self, trainer) -> None:
        """The two that read the trainer's model and state, once it exists."""
        self.window.trainer = self.best.trainer = trainer


def _measured(spec: TrainJobSpec, state, train_loss: float, resume: Path | None, watch: _Watchers,
              tokens_per_step: float, seconds: float) -> dict:
    """What the attempt did, from the trainer's state: the fields every ``TrainResult`` has."""
    history = [(int(e["step"]), float(e["loss"])) for e in state.log_history if "loss" in e]
    evaluations = eval_history(state.log_history)
    lowest = best_of(evaluations)
    last = watch.committer.last_committed or resume
    trained_tokens = int(tokens_per_step * (state.global_step - (checkpoints.step_of(resume) if resume else 0)))
    return dict(
        steps=state.global_step, max_steps=state.max_steps, train_loss=train_loss,
        final_loss=history[-1][1] if history else train_loss, trained_tokens=trained_tokens,
        seconds=seconds, tokens_per_second=trained_tokens / max(seconds, 1e-9), loss_history=history,
        resumed_from=str(resume) if resume else None, last_checkpoint=str(last) if last else None,
        micro_batch_size=spec.micro_batch_size, gradient_accumulation_steps=spec.gradient_accumulation_steps,
        oom_retries=0, eval_history=evaluations, best_step=lowest[0] if lowest else None,
        best_eval_loss=lowest[1] if lowest else None, selected_step=state.global_step,
    )


def _completed(spec: TrainJobSpec, trainer, tokenizer, watch: _Watchers, measured: dict, stopped_early: bool,
               log: Log) -> TrainResult:
    """The adapter written (the best-evaluated weights or the last) and the completed result."""
    adapter_dir = Path(spec.output_dir) / "adapter"
    lowest = (measured["best_step"], measured["best_eval_loss"]) if measured["best_step"] is not None else None
    selection = _save_adapter(trainer, tokenizer, spec, watch.best, lowest, adapter_dir, log)
    if selection == "best":
        assert lowest is not None  # _save_adapter says "best" only when there is an evaluated step
        measured["selected_step"] = lowest[0]
    if not math.isfinite(measured["final_loss"]):
        raise TrainingDiverged.at(trainer.state.global_step, f"loss={measured['final_loss']}", spec.learning_rate,
                                  spec.tenant_overrides)
    return TrainResult(outcome=COMPLETED, adapter_dir=str(adapter_dir), checkpoint_selection=selection,
                       early_stopped=stopped_early, **measured)


def _save_adapter(trainer, tokenizer, spec: TrainJobSpec, best, lowest: tuple[int, float] | None,
                  adapter_dir: Path, log: Log) -> str:
    """Write the final adapter: the best-evaluated weights or the last ones. Returns which it wrote."""
    from ftpipe.training.callbacks import agree_across_ranks

    step = trainer.state.global_step
    if spec.checkpoint_selection != "best" or lowest is None or lowest[0] == step:
        trainer.save_model(str(adapter_dir))
        tokenizer.save_pretrained(str(adapter_dir))
        return "best" if spec.checkpoint_selection == "best" and lowest is not None else "last"
    saved = best.weights_of(lowest[0])
    problem = checkpoints.verify(saved) if is_main_process() else None
    (missing,) = agree_across_ranks(trainer.args, problem is not None)  # every rank takes the same branch
    if missing:
        log(f"the best weights (step {lowest[0]}) are unusable ({problem}); the adapter is the last weights")
        trainer.save_model(str(adapter_dir))
        tokenizer.save_pretrained(str(adapter_dir))
        return "last"
    if is_main_process():
        shutil.rmtree(adapter_dir, ignore_errors=True)
        shutil.copytree(saved, adapter_dir, ignore=shutil.ignore_patterns(checkpoints.MANIFEST_NAME))
        tokenizer.save_pretrained(str(adapter_dir))
    log(f"the adapter is the weights of step {lowest[0]} (validation loss {lowest[1]:.4f}), "
        f"not those of the last step {step}")
    return "best"


def save_completed(spec: TrainJobSpec, result: TrainResult) -> dict:
    """Write TRAINING_RESULT, after the adapter and in one rename: whoever finds it finds a whole adapter."""
    assert result.adapter_dir is not None  # only a completed result is saved, and it has its adapter
    adapter = Path(result.adapter_dir)
    record = {
        "spec": spec.to_dict(), "steps": result.steps, "max_steps": result.max_steps,
        "loss_history": result.loss_history, "final_loss": result.final_loss, "train_loss": result.train_loss,
        "eval_history": result.eval_history, "best_step": result.best_step, "best_eval_loss": result.best_eval_loss,
        "checkpoint_selection": result.checkpoint_selection, "selected_step": result.selected_step,
        "early_stopped": result.early_stopped,
        # This attempt's work: a resumed job trained only the steps after its checkpoint. The process also spent
        # time starting, importing and loading the model, which no FLOP count predicts.
        "seconds": result.seconds, "trained_tokens": result.trained_tokens,
        "process_seconds": time.time() - psutil.Process().create_time(),
        "steps_run": result.steps - (checkpoints.step_of(Path(result.resumed_from)) if result.resumed_from else 0),
        "adapter_files": {str(p.relative_to(adapter)): p.stat().st_size for p in sorted(adapter.rglob("*"))
                          if p.is_file()},
    }
    target = Path(spec.output_dir) / TRAINING_RESULT
    tmp = target.with_name(f".{TRAINING_RESULT}.tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, target)
    return record


def completed_training(spec: TrainJobSpec) -> dict | None:
    """The record of this spec's finished training, when it completed and its adapter is still whole; else None."""
    output = Path(spec.output_dir)
    try:
        record = json.loads((output / TRAINING_RESULT).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("spec") != spec.to_dict() or not record.get("adapter_files"):
        return None  # another spec's, or one written before the record named its spec
    if record.get("steps", 0) < record.get("max_steps", 1) and record.get("early_stopped") is not True:
        return None  # not finished: neither every step nor an early stop
    adapter = output / "adapter"
    whole = all((adapter / name).is_file() and (adapter / name).stat().st_size == size
                for name, size in record["adapter_files"].items())
    return record if whole else None


def _trainer_builder(objective: str):
    if objective == "dpo":
        from ftpipe.training.dpo import build_dpo_trainer

        return build_dpo_trainer
    if objective == "sft":
        from ftpipe.training.sft import build_sft_trainer

        return build_sft_trainer
    raise ValueError(f"unknown objective {objective!r}; use sft or dpo")


def _sharding(spec: TrainJobSpec) -> dict:
    """Several processes: DDP replicates an adapter run; a full fine-tune shards weights and optimizer (FSDP)."""
    if spec.method != "full" or int(os.environ.get("WORLD_SIZE", "1")) == 1:
        return {}
    # FSDP2, resharding after each forward (full shard); layers are wrapped by the model's _no_split_modules.
    return {"fsdp": True, "fsdp_config": {"reshard_after_forward": True}}


def is_main_process() -> bool:
    """Rank 0 of a torchrun launch, or the only process; it alone changes the checkpoint area."""
    return int(os.environ.get("RANK", "0")) == 0


def _is_out_of_memory(exc: BaseException) -> bool:
    import torch

    return isinstance(exc, torch.OutOfMemoryError) or "CUDA out of memory" in str(exc)


def _release_memory() -> None:
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _out_of_memory(attempt: TrainJobSpec, requested: TrainJobSpec) -> OutOfMemory:
    tenant_set = [k for k in ("micro_batch_size", "max_seq_len") if k in requested.tenant_overrides]
    advice = ["use method qlora: a 4-bit base needs about a quarter of the weight memory",
              f"lower max_seq_len (now {attempt.max_seq_len}); the validation report shows the token p95"]
    if tenant_set:
        advice.insert(0, f"remove your {' and '.join(tenant_set)} override(s) and let the platform choose")
    return OutOfMemory(f"out of GPU memory at micro_batch_size={attempt.micro_batch_size}, "
                       f"max_seq_len={attempt.max_seq_len}", advice, caused_by_tenant=bool(tenant_set))
