from dagster import ConfigurableResource
from pydantic import Field

from ftpipe.tenants import PlatformConfig, load_platform_config


class PlatformResource(ConfigurableResource):
    """The platform's tenant configuration file (tenants, tiers, default pool)."""

    tenants_file: str = Field(description="Path of tenants.yaml")

    def config(self) -> PlatformConfig:
        return load_platform_config(self.tenants_file)
