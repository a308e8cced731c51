"""The training plan of a job: the resolved spec, where each value came from, and its memory estimate.

Made once, at the pre-flight, from the tokenized dataset's statistics; the trainer runs exactly this spec
and the tenant's report shows it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ftpipe.tenants import PoolConfig
from ftpipe.training.autoconfig import auto_hyperparameters, evaluation_interval
from ftpipe.training.memory import MemoryEstimate, ModelShape, estimate_memory
from ftpipe.training.spec import TrainJobSpec, explain, resolve_spec


@dataclass
class TrainingPlan:
    spec: TrainJobSpec
    rows: list[dict]
    memory: MemoryEstimate
    gpu_memory_gb: float

    @property
    def fits(self) -> bool:
        return self.memory.total_gb <= self.gpu_memory_gb


def plan_training(base_model_path: str, num_parameters: int, method: str, objective: str, overrides: dict,
                  train_file: str, n_examples: int, longest_example_tokens: int, pool: PoolConfig,
                  eval_file: str = "") -> TrainingPlan:
    """Raises ``autoconfig.DoesNotFit`` when not even a micro-batch of one fits the pool's GPUs. ``eval_file``:
    the tokenized held-out split, scored every ``eval_steps`` during training."""
    shape = ModelShape.from_pretrained_dir(base_model_path, num_parameters)
    max_len = int(overrides.get("max_seq_len", TrainJobSpec.max_seq_len))
    seq_len = min(max_len, max(1, longest_example_tokens))
    # A DPO example is two sequences (chosen and rejected) in one forward pass.
    sequences = 2 if objective == "dpo" else 1
    automatic = auto_hyperparameters(shape, method, n_examples, seq_len, pool.gpu_memory_gb, pool.gpus_per_slot,
                                     lora_r=int(overrides["lora_r"]) if "lora_r" in overrides else None,
                                     sequences_per_example=sequences)
    spec = resolve_spec(base_model_path, train_file, method, overrides, {k: c.value for k, c in automatic.items()})
    spec.objective = objective
    spec.eval_file = eval_file
    if "eval_steps" not in overrides:
        # Known only now: the steps follow from the batch sizes just chosen (and the tenant's epochs).
        automatic["eval_steps"] = evaluation_interval(spec, n_examples, pool.gpus_per_slot)
        spec.eval_steps = int(automatic["eval_steps"].value)
    memory = estimate_memory(shape, method, spec.lora_r, seq_len, spec.micro_batch_size * sequences,
                             pool.gpus_per_slot, spec.activation_checkpointing)
    return TrainingPlan(spec, explain(spec, {k: c.reason for k, c in automatic.items()}), memory,
                        pool.gpu_memory_gb)
