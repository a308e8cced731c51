from dagster import ConfigurableResource
from pydantic import Field

from ftpipe.artifacts import ArtifactLayout


class ArtifactStoreResource(ConfigurableResource):
    """The platform's own storage for snapshots, caches, checkpoints and adapters (a shared volume in a cluster)."""

    root: str = Field(description="Folder shared by the run workers and trainer processes")

    def layout(self) -> ArtifactLayout:
        return ArtifactLayout(self.root)
