"""The platform's tenant configuration: who the tenants are, their tier, and what each tier gets."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator


class TierConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    priority: int = Field(description="Dagster run priority: higher dequeues first.")
    max_examples: int = 1_000_000
    max_concurrent_runs: int = 1


class TenantConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tier: str
    display_name: str | None = None
    webhook_url: str | None = None


class PlatformConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    default_pool: str = "h100x1"
    tiers: dict[str, TierConfig]
    tenants: dict[str, TenantConfig] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _tiers_exist(self) -> "PlatformConfig":
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
