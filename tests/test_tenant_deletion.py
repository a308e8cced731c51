"""Tenant deletion's guards and the S3 erasure, apart from the full run in test_end_to_end."""

import boto3
import pytest
from dagster import DagsterRunStatus, instance_for_test
from dagster._core.test_utils import create_run_for_test

from ft_assets.tenant_deletion import TenantBusy, delete_tenant
from ftpipe.artifacts import ArtifactLayout
from ftpipe.catalog.adapters import AdapterRegistry
from ftpipe.objectstore import LocalObjectStore, S3ObjectStore
from partitions.run_tags import TENANT_TAG


def test_deletion_waits_for_the_tenants_unfinished_runs(tmp_path):
    store = LocalObjectStore(tmp_path / "landing")
    store.write_bytes("tenants/acme/jobs/a/manifest.yaml", b"x")
    with instance_for_test() as instance:
        run = create_run_for_test(instance, job_name="finetune", tags={TENANT_TAG: "acme"},
                                  status=DagsterRunStatus.STARTED)
        with pytest.raises(TenantBusy, match=f"1 queued or running run\\(s\\): {run.run_id}; cancel them first"):
            delete_tenant("acme", instance, store, ArtifactLayout(tmp_path / "artifacts"),
                          AdapterRegistry(tmp_path / "c.duckdb"), tmp_path / "serving")
    assert store.exists("tenants/acme/jobs/a/manifest.yaml")  # nothing was touched


def test_a_name_that_could_leave_the_tenants_prefix_is_refused(tmp_path):
    with instance_for_test() as instance, pytest.raises(ValueError, match="tenant"):
        delete_tenant("../acme", instance, LocalObjectStore(tmp_path), ArtifactLayout(tmp_path),
                      AdapterRegistry(tmp_path / "c.duckdb"), tmp_path / "serving")


def test_s3_erasure_removes_every_version_and_only_the_tenants(s3_endpoint):
    client = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    client.create_bucket(Bucket="erase")
    client.put_bucket_versioning(Bucket="erase", VersioningConfiguration={"Status": "Enabled"})
    store = S3ObjectStore(client, "erase", prefix="landing")
    for n in range(3):
        store.write_bytes("tenants/acme/jobs/a/data.jsonl", f"v{n}".encode(), overwrite=True)
    store.write_bytes("tenants/acme/results/a/report.md", b"r")
    store.write_bytes("tenants/acmeco/jobs/b/data.jsonl", b"other tenant, same prefix letters")
    assert store.delete_prefix("tenants/acme/") == 2
    left = client.list_object_versions(Bucket="erase", Prefix="landing/tenants/acme/")
    assert not left.get("Versions") and not left.get("DeleteMarkers")
    assert [o.key for o in store.list("tenants/")] == ["tenants/acmeco/jobs/b/data.jsonl"]
    with pytest.raises(ValueError, match="must name a folder"):
        store.delete_prefix("tenants/acmeco")
