"""Hyperparameters chosen from the model's size, the dataset's size and the pool, each with its reason.

The tenant's manifest overrides any of them; ``resolve_spec`` applies the overrides on top and the report
shows which values came from where.

- learning rate: 2e-4 for adapters and 2e-5 for a full fine-tune at 1B parameters and above; smaller
  models take larger steps, scaled by sqrt(1B / parameters) up to 10x (a 1M-parameter model moves at 2e-3);
- LoRA rank by model size: 16 below 10B parameters, 32 below 40B, 64 above; alpha = 2 x rank;
- the effective batch: 16 examples, or fewer so that an epoch has at least 10 optimizer steps;
- micro-batch: the largest power of two up to the effective batch whose memory estimate fits 90% of one
  GPU of the pool; gradient accumulation makes up the rest of the effective batch; activation checkpointing
  (about a third more compute) only when not even a micro-batch of one fits without it;
- epochs by dataset size: 3 below 1,000 examples, 2 below 10,000, then 1;
- the validation loss about 10 times per run (``eval_steps``), once the steps are known.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ftpipe.training.memory import ModelShape, estimate_memory
from ftpipe.training.methods import ADAPTER_METHODS
from ftpipe.training.validation import AUTO_EVALUATIONS

TARGET_EFFECTIVE_BATCH = 16
MIN_STEPS_PER_EPOCH = 10
MEMORY_HEADROOM = 0.9


@dataclass(frozen=True)
class Choice:
    value: float | int
    reason: str


class DoesNotFit(ValueError):
    """Not even a micro-batch of one fits the pool's GPU memory."""


def _pow2_floor(x: float) -> int:
    return 1 << max(0, int(math.floor(math.log2(max(1.0, x)))))


def learning_rate(num_parameters: int, method: str) -> Choice:
    base = 2e-4 if method in ADAPTER_METHODS else 2e-5
    scale = min(10.0, max(1.0, math.sqrt(1e9 / num_parameters)))
    return Choice(float(f"{base * scale:.3g}"),
                  f"{base:g} for {'adapters' if method in ADAPTER_METHODS else 'full fine-tuning'} at >=1B parameters, "
                  f"x{scale:.2g} for {num_parameters / 1e6:,.1f}M parameters")


def lora_rank(num_parameters: int) -> Choice:
    rank = 16 if num_parameters < 10e9 else 32 if num_parameters < 40e9 else 64
    return Choice(rank, f"rank {rank} for {num_parameters / 1e9:.3g}B parameters")


def epochs(n_examples: int) -> Choice:
    value = 3 if n_examples < 1_000 else 2 if n_examples < 10_000 else 1
    return Choice(value, f"{value} epoch(s) for {n_examples:,} examples")


def auto_hyperparameters(shape: ModelShape, method: str, n_examples: int, seq_len: int, gpu_memory_gb: float,
                         gpus: int = 1, lora_r: int | None = None, sequences_per_example: int = 1) -> dict[str, Choice]:
    """``seq_len``: the longest padded batch row (the dataset's longest example, capped at max_seq_len);
    ``sequences_per_example``: 2 for DPO, whose batches hold the chosen and the rejected sequence."""
    chosen = {"learning_rate": learning_rate(shape.num_parameters, method)}
    rank = 0
    if method in ADAPTER_METHODS:
        chosen["lora_r"] = lora_rank(shape.num_parameters)
        rank = lora_r or int(chosen["lora_r"].value)
        chosen["lora_alpha"] = Choice(2 * rank, "2 x rank")
    chosen["epochs"] = epochs(n_examples)

    effective = min(TARGET_EFFECTIVE_BATCH, _pow2_floor(n_examples / MIN_STEPS_PER_EPOCH / gpus) * gpus)
    budget = gpu_memory_gb * MEMORY_HEADROOM
    per_gpu = max(1, effective // gpus)
    micro = per_gpu
    def need_at(micro_batch: int, checkpointing: bool):
        return estimate_memory(shape, method, rank, seq_len, micro_batch * sequences_per_example, gpus, checkpointing)

    checkpointing = need_at(1, False).total_gb > budget
    while micro > 1 and need_at(micro, checkpointing).total_gb > budget:
        micro //= 2
    need = need_at(micro, checkpointing)
    if need.total_gb > budget:
        raise DoesNotFit(f"{method} of a {shape.num_parameters / 1e9:.3g}B-parameter model at {seq_len} tokens needs "
                         f"{need.total_gb:.1f} GB per GPU even at micro-batch 1 with activation checkpointing; "
                         f"the pool's GPUs have {gpu_memory_gb:g} GB")
    chosen["activation_checkpointing"] = Choice(
        checkpointing, "needed to fit micro-batch 1" if checkpointing else "not needed: everything fits without")
    accumulation = max(1, per_gpu // micro)
    chosen["micro_batch_size"] = Choice(micro, f"largest that fits {budget:.3g} GB ({need.total_gb:.3g} GB estimated)")
    chosen["gradient_accumulation_steps"] = Choice(
        accumulation, f"effective batch {micro * accumulation * gpus} = {micro} x {accumulation} x {gpus} GPU(s)")
    return chosen


def optimizer_steps(spec, n_examples: int, gpus: int = 1) -> int:
    """The optimizer steps the Trainer will run, as it counts them (a last short accumulation is a step)."""
    if spec.max_steps > 0:
        return spec.max_steps
    batches = math.ceil(n_examples / (spec.micro_batch_size * gpus))
    per_epoch = max(1, math.ceil(batches / spec.gradient_accumulation_steps))
    return max(1, math.ceil(spec.epochs * per_epoch))


def evaluation_interval(spec, n_examples: int, gpus: int = 1) -> Choice:
    """About ``AUTO_EVALUATIONS`` validation losses per run. Packed rows are only counted when training
    starts, so a packed run keeps 0: the Trainer then takes a tenth of its own step count."""
    if spec.packing:
        return Choice(0, f"every {1 / AUTO_EVALUATIONS:.0%} of the steps, counted when the packed rows are")
    steps = optimizer_steps(spec, n_examples, gpus)
    every = max(1, round(steps / AUTO_EVALUATIONS))
    return Choice(every, f"about {AUTO_EVALUATIONS} evaluations over {steps:,} optimizer steps")
