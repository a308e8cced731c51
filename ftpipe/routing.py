"""Admission routing: the smallest GPU pool whose slot fits a job, from its memory estimate.

Decided at admission, from the manifest and the base model's shape alone (no data read yet): the sequence
length is the manifest's ``max_seq_len`` (an upper bound of the longest example), the effective batch the
platform's target. Pools are tried from the smallest slot up (GPUs per slot, then GPU memory, then price);
a job that fits none is refused before it queues, with its estimate.
"""

from __future__ import annotations

from dataclasses import dataclass

from ftpipe.tenants import PlatformConfig
from ftpipe.training.autoconfig import DoesNotFit, auto_hyperparameters
from ftpipe.training.memory import ModelShape

ADMISSION_EXAMPLES = 1_000_000
"""Dataset size assumed at admission: large enough that the effective batch is the platform's target."""


@dataclass(frozen=True)
class Route:
    pool: str | None
    """None: no pool fits."""
    needs: dict[str, str]
    """Per pool tried: what the job needs there, or why it does not fit."""

    def refusal(self) -> str:
        return "the job fits no GPU pool: " + "; ".join(f"{pool}: {why}" for pool, why in self.needs.items())


def route(platform: PlatformConfig, shape: ModelShape, method: str, objective: str, max_seq_len: int,
          lora_r: int | None = None) -> Route:
    needs: dict[str, str] = {}
    candidates = sorted(platform.pools.items(),
                        key=lambda item: (item[1].gpus_per_slot, item[1].gpu_memory_gb, item[1].price_per_gpu_hour))
    for name, pool in candidates:
        try:
            plan = auto_hyperparameters(shape, method, ADMISSION_EXAMPLES, max_seq_len, pool.gpu_memory_gb,
                                        pool.gpus_per_slot, lora_r=lora_r,
                                        sequences_per_example=2 if objective == "dpo" else 1)
        except DoesNotFit as exc:
            needs[name] = str(exc)
            continue
        needs[name] = plan["micro_batch_size"].reason
        return Route(name, needs)
    return Route(None, needs)
