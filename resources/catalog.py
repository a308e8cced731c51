from dagster import ConfigurableResource
from pydantic import Field

from ftpipe.catalog.adapters import AdapterRegistry
from ftpipe.leases import DeviceLeases
from ftpipe.metering.ledger import UsageLedger


class CatalogResource(ConfigurableResource):
    """The DuckDB catalog: the adapter registry, the GPU usage ledger and the device leases."""

    path: str = Field(description="DuckDB database file")

    def adapters(self) -> AdapterRegistry:
        return AdapterRegistry(self.path)

    def ledger(self) -> UsageLedger:
        return UsageLedger(self.path)

    def leases(self) -> DeviceLeases:
        return DeviceLeases(self.path)
