from dagster import ConfigurableResource
from pydantic import Field

from ftpipe.catalog.adapters import AdapterRegistry
from ftpipe.catalog.api_keys import ApiKeys
from ftpipe.leases import DeviceLeases
from ftpipe.metering.ledger import UsageLedger


class CatalogResource(ConfigurableResource):
    """The DuckDB catalog: the adapter registry, the GPU usage ledger, the device leases and the API's keys,
    files and job requests."""

    path: str = Field(description="DuckDB database file")

    def adapters(self) -> AdapterRegistry:
        return AdapterRegistry(self.path)

    def ledger(self) -> UsageLedger:
        return UsageLedger(self.path)

    def leases(self) -> DeviceLeases:
        return DeviceLeases(self.path)

    def api_keys(self) -> ApiKeys:
        return ApiKeys(self.path)
