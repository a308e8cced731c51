from dagster import ConfigurableResource
from pydantic import Field

from ftpipe.catalog.adapters import AdapterRegistry
from ftpipe.metering.ledger import UsageLedger


class CatalogResource(ConfigurableResource):
    """The DuckDB catalog: the adapter registry and the GPU usage ledger."""

    path: str = Field(description="DuckDB database file")

    def adapters(self) -> AdapterRegistry:
        return AdapterRegistry(self.path)

    def ledger(self) -> UsageLedger:
        return UsageLedger(self.path)
