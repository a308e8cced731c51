from dagster import ConfigurableResource
from pydantic import Field

from ftpipe.catalog.adapters import AdapterRegistry


class CatalogResource(ConfigurableResource):
    """The DuckDB catalog holding the adapter registry."""

    path: str = Field(description="DuckDB database file")

    def adapters(self) -> AdapterRegistry:
        return AdapterRegistry(self.path)
