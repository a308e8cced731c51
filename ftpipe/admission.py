"""Admission: what the upload sensor decides about one manifest, before anything queues.

Everything that can be known from the manifest, the platform's configuration and the base model's shape is
decided here, so that a job that cannot succeed costs no queue slot and no GPU time: the manifest parses
within its limits, the base model is registered, the adapter could be served (rank, method), and some pool's
slot fits the job's memory estimate. The data itself is checked later, by the pre-flight, which calls
``serving_problems`` again for runs launched by hand.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ftpipe.basemodel.registry import BaseModelNotFound, BaseModelRegistry
from ftpipe.catalog.serving import ServingProfile
from ftpipe.manifest import JobManifest, ManifestError, parse_manifest
from ftpipe.routing import route
from ftpipe.tenants import PlatformConfig
from ftpipe.training.memory import ModelShape
from ftpipe.training.spec import TrainJobSpec


@dataclass(frozen=True)
class Admission:
    pool: str | None
    refusal: str | None = None
    """Why the job cannot run, for the tenant's ``rejected.md``; None when it queues on ``pool``."""
    files: dict[str, str] = field(default_factory=dict)
    """The data files an admitted job needs in its folder, by manifest field (``dataset``, ``eval_dataset``)."""


def serving_problems(manifest: JobManifest, serving: ServingProfile, source: str) -> list[str]:
    """What would make the trained adapter fail the serving gate, known before it trains."""
    problems = []
    rank = manifest.hyperparameters.get("lora_r")
    if rank is not None and rank > serving.max_lora_rank:
        problems.append(f"{source}: field 'hyperparameters.lora_r': {rank} is above the serving fleet's maximum "
                        f"rank {serving.max_lora_rank}; an adapter of that rank could never be served")
    if manifest.method == "dora" and not serving.allow_dora:
        problems.append(f"{source}: field 'method': the serving fleet does not load DoRA adapters; use lora or rslora")
    return problems


def admit(manifest_bytes: bytes, source: str, config: PlatformConfig, registry: BaseModelRegistry) -> Admission:
    try:
        manifest = parse_manifest(manifest_bytes, source=source)
        base = registry.resolve(manifest.base_model)
    except ManifestError as exc:
        return Admission(None, str(exc))
    except BaseModelNotFound as exc:
        return Admission(None, f"{source}: field 'base_model': {exc}")
    problems = serving_problems(manifest, config.serving, source)
    if problems:
        return Admission(None, "; ".join(problems))
    hyperparameters = manifest.hyperparameters
    decision = route(config, ModelShape.from_pretrained_dir(base.path, base.num_parameters), manifest.method,
                     manifest.objective, hyperparameters.get("max_seq_len", TrainJobSpec.max_seq_len),
                     lora_r=hyperparameters.get("lora_r"))
    if decision.pool is None:
        return Admission(None, decision.refusal())
    files = {"dataset": manifest.dataset, "eval_dataset": manifest.eval_dataset}
    return Admission(decision.pool, files={name: file for name, file in files.items() if file is not None})
