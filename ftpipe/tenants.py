"""The platform's tenant configuration: who the tenants are, their tier, and what each tier gets."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ftpipe.catalog.serving import ServingProfile
from ftpipe.evaluation.gates import GateError, parse_gates
from ftpipe.manifest import BASE_MODEL_ID


class TierConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    priority: int = Field(description="Dagster run priority: higher dequeues first.")
    max_examples: int = 1_000_000
    max_upload_gb: float = Field(default=20, gt=0, description="Largest dataset file a job may name")
    max_gpu_hours_per_job: float | None = Field(
        default=None, gt=0, description="A job whose pre-flight estimate is above this is refused before it "
                                        "trains; the trainer is also stopped at a multiple of its estimate")
    max_concurrent_runs: int = 1
    gpu_hours_per_month: float | None = Field(default=None, ge=0, description="Monthly GPU-hour quota; none: unlimited")
    quota: Literal["soft", "hard"] = Field(
        default="soft", description="hard: refuse jobs past the quota; soft: run them and bill the overage")
    overage_price_multiplier: float = Field(default=1.0, ge=1.0, description="Price factor beyond a soft quota")


class PoolConfig(BaseModel):
    """A GPU pool: what one slot is, how many there are, and what it delivers and costs."""

    model_config = ConfigDict(extra="forbid")
    gpu: str
    gpus_per_slot: int = 1
    slots: int = 1
    gpu_memory_gb: float = Field(gt=0, description="Memory of one GPU (for the CPU pool: what one trainer may use)")
    peak_tflops: float = Field(description="Peak dense FLOP/s of one GPU at the training precision, in TFLOP/s")
    mfu: float = Field(default=0.35, gt=0, le=1, description="Model FLOPs utilization reached in practice")
    price_per_gpu_hour: float = 0.0
    node_selector: dict[str, str] = Field(default_factory=dict, description="Kubernetes: the pool's node group")
    tolerations: list[dict] = Field(default_factory=list, description="Kubernetes: taints the pool's pods tolerate")


class TenantConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tier: str
    display_name: str | None = None
    webhook_url: str | None = None
    webhook_secret_env: str | None = Field(default=None, description="Environment variable holding the "
                                                                     "webhook's HMAC secret (never the secret)")


class EvaluationConfig(BaseModel):
    """What every adapter is evaluated on and must meet, whatever its manifest says."""

    model_config = ConfigDict(extra="forbid")
    golden_set: str | None = Field(default=None, description="JSONL golden set; default: the one shipped "
                                                              "with the project (ftpipe/evaluation/golden/)")
    quality_gates: dict[str, str] = Field(
        default_factory=lambda: {"holdout_delta": "> 0", "golden_regression": "<= 0.1",
                                 "golden_perplexity_ratio": "<= 1.5"},
        description="Platform gates, applied to every job on top of its manifest's own")
    reeval_tolerance: float = Field(
        default=0.02, ge=0, description="Nightly re-evaluation: how far golden exact match may move from the "
                                        "score at registration before the adapter is reported")

    @model_validator(mode="after")
    def _gates_parse(self) -> "EvaluationConfig":
        try:
            parse_gates(self.quality_gates, source="platform")
        except GateError as exc:
            raise ValueError(str(exc)) from None
        return self


class RetentionConfig(BaseModel):
    """What the nightly checkpoint retention keeps (``ftpipe.training.retention``)."""

    model_config = ConfigDict(extra="forbid")
    keep_checkpoints: int = Field(default=1, ge=0, description="Newest checkpoints kept per training directory "
                                                               "(at least one while the job is unfinished)")
    idle_hours: float = Field(default=24, gt=0, description="Directories changed more recently are left alone")


class PreemptionConfig(BaseModel):
    """When a waiting run may stop another to take its slot (``ftpipe.preemption``)."""

    model_config = ConfigDict(extra="forbid")
    enabled: bool = True
    wait_seconds: float = Field(default=600, ge=0, description="How long a preempting run waits before it may")
    max_progress_share: float = Field(default=0.5, gt=0, le=1, description="Only runs less than this far "
                                                                           "through their expected time are stopped")
    preempting_tiers: list[str] = Field(default_factory=lambda: ["premium"])
    preemptible_tiers: list[str] = Field(default_factory=lambda: ["free"])


class PlatformConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    default_pool: str = "h100x1"
    pools: dict[str, PoolConfig]
    tiers: dict[str, TierConfig]
    tenants: dict[str, TenantConfig] = Field(default_factory=dict)
    serving: ServingProfile = Field(default_factory=ServingProfile)
    retention: RetentionConfig = Field(default_factory=RetentionConfig)
    preemption: PreemptionConfig = Field(default_factory=PreemptionConfig)
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)
    base_models: dict[str, str] = Field(
        default_factory=dict, description="The base models a manifest may name: id -> a local directory or a hub "
                                          "id (the built-in ftpipe/tiny-llama is always registered)")

    @model_validator(mode="after")
    def _tiers_exist(self) -> "PlatformConfig":
        for model_id in self.base_models:
            if not BASE_MODEL_ID.fullmatch(model_id):
                raise ValueError(f"base_models: {model_id!r} is not a model id such as 'org/name'")
        if self.default_pool not in self.pools:
            raise ValueError(f"default_pool '{self.default_pool}' is not among the pools {sorted(self.pools)}")
        for name, tenant in self.tenants.items():
            if tenant.tier not in self.tiers:
                raise ValueError(f"tenant '{name}' has unknown tier '{tenant.tier}' (tiers: {sorted(self.tiers)})")
        return self

    def tenant(self, name: str) -> TenantConfig:
        try:
            return self.tenants[name]
        except KeyError:
            raise KeyError(f"tenant '{name}' is not configured on this platform") from None

    def tier_of(self, name: str) -> TierConfig:
        return self.tiers[self.tenant(name).tier]


def load_platform_config(path: str | Path) -> PlatformConfig:
    return PlatformConfig.model_validate(yaml.safe_load(Path(path).read_text()))
