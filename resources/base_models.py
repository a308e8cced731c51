from dagster import ConfigurableResource
from pydantic import Field

from ftpipe.basemodel.registry import BaseModelRegistry


class BaseModelsResource(ConfigurableResource):
    """Resolves base-model ids (built-in, aliased, local path or hub id) to loadable weights and digests."""

    cache_dir: str = Field(description="Where built-in models are built and cached")
    aliases: dict[str, str] = Field(default_factory=dict, description="id -> local path or hub id")

    def registry(self) -> BaseModelRegistry:
        return BaseModelRegistry(self.cache_dir, self.aliases)
