from dagster import ConfigurableResource
from pydantic import Field

from ftpipe.catalog.adapters import AdapterRegistry
from ftpipe.catalog.api_keys import ApiKeys
from ftpipe.leases import DeviceLeases
from ftpipe.metering.ledger import UsageLedger


class CatalogResource(ConfigurableResource):
    """The catalog: the adapter registry, the GPU usage ledger, the device leases and the API's keys,
    files and job requests, in a DuckDB file or on PostgreSQL (``ftpipe.catalog.db``)."""

    location: str = Field(description="a DuckDB database file, or a postgresql:// URL (the password in PGPASSWORD, "
                                      "not here; ?schema=NAME for a schema other than ftpipe)")

    def adapters(self) -> AdapterRegistry:
        return AdapterRegistry(self.location)

    def ledger(self) -> UsageLedger:
        return UsageLedger(self.location)

    def leases(self) -> DeviceLeases:
        return DeviceLeases(self.location)

    def api_keys(self) -> ApiKeys:
        return ApiKeys(self.location)
