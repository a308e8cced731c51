"""What every route needs: the tenant's stores, the platform's configuration and the Dagster instance."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from ftpipe.basemodel.registry import BaseModelRegistry
from ftpipe.catalog.adapters import AdapterRegistry
from ftpipe.catalog.api_keys import ApiKeys
from ftpipe.catalog.files import TenantFiles
from ftpipe.catalog.idempotency import IdempotencyKeys
from ftpipe.catalog.job_requests import JobRequests
from ftpipe.objectstore import ObjectStore
from ftpipe.tenants import PlatformConfig
from ftpipe_api.rate_limit import RateLimiter

if TYPE_CHECKING:
    from dagster import DagsterInstance

DEFAULT_MAX_FILE_BYTES = 256 * 1024 * 1024
"""An upload through the API is held in memory once on its way to the landing zone; larger datasets go to the
bucket directly (``ftpipe submit`` or any S3 client), where no such copy is made."""


@dataclass
class ApiContext:
    store: ObjectStore
    catalog_location: str
    artifacts_root: str
    platform: PlatformConfig
    base_models: BaseModelRegistry
    instance_factory: Callable[[], DagsterInstance]
    """A callable returning the Dagster instance (``DagsterInstance.get``), opened on first use."""
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    limiter: RateLimiter = field(default_factory=RateLimiter)

    @classmethod
    def from_resources(cls, resources: dict, instance_factory, **kwargs) -> "ApiContext":
        return cls(store=resources["landing"].store(), catalog_location=resources["catalog"].location,
                   artifacts_root=resources["artifacts"].root,
                   platform=resources["platform"].config(), base_models=resources["base_models"].registry(),
                   instance_factory=instance_factory, **kwargs)

    @cached_property
    def instance(self):
        return self.instance_factory()

    @property
    def keys(self) -> ApiKeys:
        return ApiKeys(self.catalog_location)

    @property
    def files(self) -> TenantFiles:
        return TenantFiles(self.catalog_location)

    @property
    def jobs(self) -> JobRequests:
        return JobRequests(self.catalog_location)

    @property
    def idempotency(self) -> IdempotencyKeys:
        return IdempotencyKeys(self.catalog_location)

    @property
    def adapters(self) -> AdapterRegistry:
        return AdapterRegistry(self.catalog_location)
