"""Trainer callbacks: progress to a sink, checkpoint schedule and commit, early stop, divergence guard, the
loss window carried across a resume, and the best-evaluated weights.

They use the public ``TrainerCallback`` hooks, so they work for SFTTrainer and DPOTrainer alike; only
``LossWindow`` also touches the Trainer's private loss accumulator.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from ftpipe.training import checkpoints
from ftpipe.training.interrupts import StopRequest
from ftpipe.training.validation import best_as_of, best_of, eval_history, evals_since_best

MetricsSink = Callable[[dict], None]


class MetricsToSink(TrainerCallback):
    """Forward each logging step (loss, learning rate, grad norm, throughput, memory) and each evaluation
    (``eval_loss``) to the sink."""

    def __init__(self, sink: MetricsSink, tokens_per_step: float) -> None:
        self.sink = sink
        self.tokens_per_step = tokens_per_step
        self.start = time.monotonic()
        self.first_step = 0

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = time.monotonic()
        self.first_step = state.global_step  # a resumed run counts throughput from where it resumed

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "eval_loss" in logs:
            self.sink({"step": state.global_step, "max_steps": state.max_steps,
                       "eval_loss": float(logs["eval_loss"])})
            return
        if not logs or "loss" not in logs:
            return
        elapsed = max(time.monotonic() - self.start, 1e-9)
        self.sink({
            "step": state.global_step,
            "max_steps": state.max_steps,
            "loss": float(logs["loss"]),
            "learning_rate": float(logs.get("learning_rate", math.nan)),
            "grad_norm": float(logs.get("grad_norm", math.nan)),
            "tokens_per_second": (state.global_step - self.first_step) * self.tokens_per_step / elapsed,
            "memory_mb": _peak_memory_mb(),
        })


@dataclass
class Divergence:
    step: int | None = None
    detail: str = ""

    @property
    def happened(self) -> bool:
        return self.step is not None


class DivergenceGuard(TrainerCallback):
    """Stop at the first non-finite loss or gradient norm, and never save the weights it produced.

    Needs ``logging_nan_inf_filter=False``: with the Trainer's default a NaN step is logged as loss 0.0.
    """

    def __init__(self, divergence: Divergence) -> None:
        self.divergence = divergence

    def on_log(self, args, state, control, logs=None, **kwargs):
        bad = {k: v for k, v in (logs or {}).items()
               if k in ("loss", "grad_norm") and isinstance(v, float) and not math.isfinite(v)}
        if bad and not self.divergence.happened:
            self.divergence.step = state.global_step
            self.divergence.detail = ", ".join(f"{k}={v}" for k, v in bad.items())
            control.should_training_stop = True
            control.should_save = False


class CheckpointSchedule(TrainerCallback):
    """Save every ``save_steps`` (the Trainer's own rule), every ``save_minutes``, and at once on a stop request.

    In a multi-process run every rank must take the same decision, or a collective save would hang; the
    decision is reduced across ranks.
    """

    def __init__(self, save_minutes: float, stop: StopRequest | None) -> None:
        self.interval = save_minutes * 60
        self.stop = stop
        self.last_save = time.monotonic()
        self.stopped_at: int | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        self.last_save = time.monotonic()

    def on_step_end(self, args, state, control, **kwargs):
        due = time.monotonic() - self.last_save >= self.interval
        stop = bool(self.stop and self.stop.requested)
        due, stop = agree_across_ranks(args, due, stop)
        if due or stop:
            control.should_save = True
        if stop:
            control.should_training_stop = True
            self.stopped_at = state.global_step

    def on_save(self, args, state, control, **kwargs):
        self.last_save = time.monotonic()


class LossWindow(TrainerCallback):
    """Carry the loss summed since the last logging step across a checkpoint, so that the first loss a resumed
    run logs averages the same steps as the uninterrupted run's.

    The Trainer logs the mean loss of the steps since its last log and starts that sum afresh on a resume. A
    checkpoint between two logging steps (a stop request, a timed save) would make the first log after the
    resume average fewer steps. Stopping only on logging steps instead would delay a preemption by up to
    ``logging_steps - 1`` steps. Each rank's partial sum goes into the checkpoint beside its RNG state.

    Reads and sets the Trainer's private ``_tr_loss``, ``_globalstep_last_logged`` and ``_total_loss_scalar``
    (transformers 5); tests/test_resume.py fails if they change meaning.
    """

    FILE = "ftpipe_loss_window_{}.json"
    PRIVATE = ("_tr_loss", "_globalstep_last_logged", "_total_loss_scalar")

    def __init__(self, resume: Path | None, log: Callable[[str], None]) -> None:
        self.resume = resume
        self.log = log
        self.trainer: Any = None  # set once the trainer is built

    def _supported(self) -> bool:
        return all(hasattr(self.trainer, name) for name in self.PRIVATE)

    def on_train_begin(self, args, state, control, **kwargs):
        if not self._supported():
            self.log("this transformers version hides the loss window: the first loss logged after a resume "
                     "may average fewer steps")
            return
        saved = self.resume / self.FILE.format(args.process_index) if self.resume else None
        if saved is None or not saved.is_file():
            return
        window = json.loads(saved.read_text())
        if window["step"] == state.global_step:
            self.trainer._tr_loss.fill_(window["loss_sum"])
            self.trainer._total_loss_scalar -= window["loss_sum"]  # the attempt's train_loss covers its own steps
            self.trainer._globalstep_last_logged = window["last_logged"]

    def on_save(self, args, state, control, **kwargs):
        if not self._supported():
            return
        staged = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        (staged / self.FILE.format(args.process_index)).write_text(json.dumps({
            "step": state.global_step, "loss_sum": self.trainer._tr_loss.item(),
            "last_logged": self.trainer._globalstep_last_logged}))


class CommitCheckpoints(TrainerCallback):
    """Seal each checkpoint the Trainer has written in staging and move it into the committed area."""

    def __init__(self, area: checkpoints.CheckpointArea, keep: int, divergence: Divergence,
                 log: Callable[[str], None]) -> None:
        self.area = area
        self.keep = keep
        self.divergence = divergence
        self.log = log
        self.last_committed: Path | None = None

    def on_save(self, args, state, control, model=None, **kwargs):
        staged = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        # Under FSDP each rank sees only its shard of the weights: the verdict is reduced across ranks.
        (poisoned,) = agree_across_ranks(args, model is not None and not _weights_finite(model))
        if poisoned:
            self.divergence.step = self.divergence.step or state.global_step
            self.divergence.detail = self.divergence.detail or "non-finite weights"
            control.should_training_stop = True
            if state.is_world_process_zero:
                checkpoints.reject(self.area, staged, "nonfinite")
                self.log(f"step {state.global_step}: weights are not finite; checkpoint discarded")
            return
        _barrier()  # every rank has written its own files (its RNG state) before the directory moves
        if state.is_world_process_zero:
            self.last_committed = checkpoints.commit(self.area, staged, self.keep)
            self.log(f"checkpoint committed: {self.last_committed.name}")
        else:
            self.last_committed = self.area.root / staged.name
        _barrier()  # and no rank runs ahead to a step whose checkpoint could be taken before this commit


class BestAdapter(TrainerCallback):
    """Keep the weights of the lowest validation loss in ``best/step-N/``, and stop training after ``patience``
    evaluations in a row without a lower one.

    The Trainer's ``load_best_model_at_end`` would keep the best *checkpoint* out of the rotation, but the
    rotation here is CommitCheckpoints', and a checkpoint also carries optimizer state worth twice the adapter.
    So the best weights are saved on their own, the way the final adapter is (``save_model``), into
    ``best/.staging-step-N`` and renamed to ``best/step-N`` once written and checksummed: a ``step-N`` directory
    is whole.

    What carries the best across a resume is the evaluation history in ``trainer_state.json``, which every
    checkpoint holds: the resumed run knows the best step as of its checkpoint, and that step's directory is
    kept. Directories of steps after the checkpoint came from an attempt whose later steps are trained again,
    and are removed; so is any best that no committed checkpoint and no current best names (a resume may fall
    back to any committed checkpoint, so each one's best is kept).
    """

    PREFIX = "step-"

    def __init__(self, root: Path, area: checkpoints.CheckpointArea, keep_weights: bool, patience: int,
                 log: Callable[[str], None]) -> None:
        self.root = root
        self.area = area
        self.keep_weights = keep_weights
        self.patience = patience
        self.log = log
        self.trainer: Any = None  # set once the trainer is built
        self.stopped_early_at: int | None = None

    def weights_of(self, step: int) -> Path:
        return self.root / f"{self.PREFIX}{step}"

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self._prune(eval_history(state.log_history))

    def on_train_end(self, args, state, control, **kwargs):
        if state.is_world_process_zero:  # the checkpoints committed since the last best may name fewer
            self._prune(eval_history(state.log_history))

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        history = eval_history(state.log_history)  # this evaluation was logged just before this call
        best = best_of(history)
        (improved,) = agree_across_ranks(args, best is not None and best[0] == state.global_step)
        if improved and self.keep_weights:
            self._save(state, history)
        exhausted = (self.patience > 0 and evals_since_best(history) >= self.patience
                     and state.global_step < state.max_steps)
        (exhausted,) = agree_across_ranks(args, exhausted)
        if exhausted:
            self.stopped_early_at = state.global_step
            control.should_training_stop = True
            # No checkpoint of the stopping step: a run resumed from it would not know that it had stopped, and
            # would train on. A run killed before its adapter is written trains these steps again and stops here.
            control.should_save = False
            self.log(f"step {state.global_step}: no lower validation loss in {self.patience} evaluation(s) since "
                     f"step {best[0] if best else '-'}; stopping early")

    def _save(self, state, history: list[tuple[int, float]]) -> None:
        step = state.global_step
        staging = self.root / f".staging-{self.PREFIX}{step}"
        if state.is_world_process_zero:
            shutil.rmtree(staging, ignore_errors=True)
        self.trainer.save_model(str(staging))  # on every rank: FSDP gathers the weights collectively
        if not state.is_world_process_zero:
            return
        checkpoints.write_manifest(staging, step)
        target = self.weights_of(step)
        shutil.rmtree(target, ignore_errors=True)  # this step's weights from an attempt that was cut short
        os.replace(staging, target)
        checkpoints.fsync_dir(self.root)
        self._prune(history)

    def _prune(self, history: list[tuple[int, float]]) -> None:
        if not self.root.is_dir():
            return
        named = [best_as_of(history, checkpoints.step_of(c)) for c in self.area.committed()] + [best_of(history)]
        keep = {self.weights_of(b[0]).name for b in named if b is not None}
        for path in self.root.iterdir():
            if path.name not in keep:
                shutil.rmtree(path) if path.is_dir() else path.unlink()


def _weights_finite(model) -> bool:
    import torch

    with torch.no_grad():
        return all(bool(torch.isfinite(p).all()) for p in model.parameters() if p.requires_grad)


def agree_across_ranks(args, *flags: bool) -> tuple[bool, ...]:
    """Each flag true on any rank is true on every rank: a decision that a collective follows (a save, a stop)
    must be the same everywhere, or the ranks hang."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return flags
    tensor = torch.tensor([int(f) for f in flags], device=args.device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return tuple(bool(v) for v in tensor.tolist())


def _barrier() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def _peak_memory_mb() -> float:
    import torch

    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 2**20
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB
