import boto3
import pytest

from ftpipe.landing import job_file_key, manifest_key, match_manifest_key, results_key
from ftpipe.objectstore import LocalObjectStore, ObjectExists, S3ObjectStore
from partitions.keys import InvalidName


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path):
    if request.param == "local":
        return LocalObjectStore(tmp_path / "landing")
    endpoint = request.getfixturevalue("s3_endpoint")
    bucket = request.getfixturevalue("s3_bucket")
    return S3ObjectStore(boto3.client("s3", endpoint_url=endpoint), bucket, "landing")


def test_uploads_are_never_overwritten(store):
    key = job_file_key("acme", "j1", "train.jsonl")
    store.write_bytes(key, b"v1")
    with pytest.raises(ObjectExists):
        store.write_bytes(key, b"v2")
    assert store.read_bytes(key) == b"v1"
    store.write_bytes(results_key("acme", "j1", "report.md"), b"r1")
    store.write_bytes(results_key("acme", "j1", "report.md"), b"r2", overwrite=True)
    assert store.read_bytes(results_key("acme", "j1", "report.md")) == b"r2"


def test_listing_and_versions(store):
    store.write_bytes(manifest_key("acme", "j1"), b"a: 1")
    store.write_bytes(job_file_key("acme", "j1", "train.jsonl"), b"x")
    infos = {i.key: i for i in store.list("tenants/")}
    assert set(infos) == {"tenants/acme/jobs/j1/manifest.yaml", "tenants/acme/jobs/j1/train.jsonl"}
    assert match_manifest_key("tenants/acme/jobs/j1/manifest.yaml") == ("acme", "j1")
    assert match_manifest_key("tenants/acme/jobs/j1/train.jsonl") is None
    assert store.exists(manifest_key("acme", "j1")) and not store.exists(manifest_key("acme", "j2"))


def test_keys_cannot_leave_the_tenant_prefix(store):
    with pytest.raises(InvalidName):
        job_file_key("../other", "j", "x")
    with pytest.raises(ValueError):
        job_file_key("acme", "j", "../../other/x")
    with pytest.raises(ValueError):
        store.write_bytes("tenants/acme/../../x", b"")
