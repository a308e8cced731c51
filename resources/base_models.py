from dagster import ConfigurableResource
from pydantic import Field

from ftpipe.basemodel.registry import BaseModelRegistry
from ftpipe.tenants import load_platform_config


class BaseModelsResource(ConfigurableResource):
    """Resolves the base-model ids the platform registered to loadable weights and digests."""

    cache_dir: str = Field(description="Where built-in models are built and cached, and every model's digests")
    tenants_file: str | None = Field(default=None, description="tenants.yaml, whose base_models are registered")
    aliases: dict[str, str] = Field(default_factory=dict, description="More registered ids -> local path or hub id")

    def registry(self) -> BaseModelRegistry:
        registered = load_platform_config(self.tenants_file).base_models if self.tenants_file else {}
        return BaseModelRegistry(self.cache_dir, {**registered, **self.aliases})
