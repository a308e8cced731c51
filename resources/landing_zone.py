from __future__ import annotations

from dagster import ConfigurableResource
from dagster_aws.s3 import S3Resource
from pydantic import Field

from ftpipe.objectstore import LocalObjectStore, ObjectStore, S3ObjectStore


class LandingZoneResource(ConfigurableResource):
    """Where tenants upload jobs: a local folder, or ``s3://bucket/prefix`` through dagster-aws's S3Resource."""

    url: str = Field(description="A local folder path, or s3://bucket/optional/prefix")
    endpoint_url: str | None = Field(default=None, description="S3-compatible endpoint (MinIO, moto, ...)")
    region_name: str | None = None

    def store(self) -> ObjectStore:
        if self.url.startswith("s3://"):
            bucket, _, prefix = self.url.removeprefix("s3://").partition("/")
            client = S3Resource(endpoint_url=self.endpoint_url, region_name=self.region_name).get_client()
            return S3ObjectStore(client, bucket, prefix)
        return LocalObjectStore(self.url)
