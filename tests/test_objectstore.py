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


def test_stat_and_missing_objects_behave_alike(store, tmp_path):
    key = job_file_key("acme", "j1", "train.jsonl")
    assert store.stat(key) is None and not store.exists(key)
    store.write_bytes(key, b"0123456789")
    info = store.stat(key)
    assert (info.key, info.size, info.kind) == (key, 10, "file")
    assert info.version == {i.key: i for i in store.list("tenants/")}[key].version
    assert [i.kind for i in store.list("tenants/")] == ["file"]
    assert store.read_bytes(key) == b"0123456789"
    missing = job_file_key("acme", "j1", "missing.jsonl")
    with pytest.raises(FileNotFoundError):
        store.read_bytes(missing)
    with pytest.raises(FileNotFoundError):
        store.download(missing, tmp_path / "d", max_bytes=100)


def test_max_bytes(store, tmp_path):
    from ftpipe.objectstore import ObjectTooLarge

    key = job_file_key("acme", "j1", "train.jsonl")
    store.write_bytes(key, b"0123456789")
    assert store.read_bytes(key, max_bytes=10) == b"0123456789"
    with pytest.raises(ObjectTooLarge, match=f"^{key} is 10 bytes, over the limit of 9 bytes$") as exc:
        store.read_bytes(key, max_bytes=9)
    assert (exc.value.size, exc.value.limit) == (10, 9) and isinstance(exc.value, ValueError)
    with pytest.raises(ObjectTooLarge):
        store.download(key, tmp_path / "d", max_bytes=9)
    assert not (tmp_path / "d").exists()
    store.download(key, tmp_path / "d", max_bytes=10)
    assert (tmp_path / "d").read_bytes() == b"0123456789"


def test_list_takes_any_start_of_a_key_as_on_s3(store):
    for job in ("j1", "j2", "k1"):
        store.write_bytes(job_file_key("acme", job, "train.jsonl"), b"x")
    assert [i.key for i in store.list("tenants/acme/jobs/j")] == [
        "tenants/acme/jobs/j1/train.jsonl", "tenants/acme/jobs/j2/train.jsonl"]
    assert [i.key for i in store.list("tenants/acme/jobs/k1/train.jsonl")] == ["tenants/acme/jobs/k1/train.jsonl"]
    assert store.list("tenants/nobody/") == []


@pytest.mark.parametrize("key", ["tenants/a\0b", "tenants\\acme", "tenants/" + "x" * 256])
def test_keys_with_nul_backslash_or_long_parts_are_refused(store, key):
    with pytest.raises(ValueError, match="invalid object key"):
        store.write_bytes(key, b"")
    with pytest.raises(ValueError, match="invalid object key"):
        store.read_bytes(key)


def test_listing_in_installments_gives_every_key_once_in_the_same_order_on_both_stores(store):
    # Names that sort differently as folder names and as keys ('a.b' < 'a/x' < 'a0'), and a deeper folder.
    keys = ["tenants/acme/jobs/a/manifest.yaml", "tenants/acme/jobs/a/train.jsonl", "tenants/acme/jobs/a.b/x",
            "tenants/acme/jobs/a0/manifest.yaml", "tenants/acme/jobs/a0/deep/er/file", "tenants/acme/jobs/b/y",
            "tenants/acme/jobs/b0", "tenants/acme/results/a/report.md"]
    for key in keys:
        store.write_bytes(key, b"x")
    everything = [info.key for info in store.list("tenants/acme/jobs/")]
    assert everything == sorted(k for k in keys if "/jobs/" in k)
    for limit in (1, 2, 3, 100):
        seen, start, more = [], "", True
        while more:
            page, more = store.list_page("tenants/acme/jobs/", start, limit)
            assert len(page) <= limit and (page or not more)
            seen += [info.key for info in page]
            start = page[-1].key if page else start
        assert seen == everything, limit
    after = "tenants/acme/jobs/a0/deep/er/file"  # from inside a folder: the rest of it, then what follows
    assert [i.key for i in store.list_page("tenants/acme/jobs/", after, 2)[0]] == [
        "tenants/acme/jobs/a0/manifest.yaml", "tenants/acme/jobs/b/y"]
    assert store.list_page("tenants/acme/jobs/", "tenants/acme/jobs/b/y", 2) == (
        [i for i in store.list("tenants/acme/jobs/") if i.key == "tenants/acme/jobs/b0"], False)


def test_children_are_the_folders_and_files_right_under_a_prefix(store):
    for key in ("tenants/acme/jobs/j1/manifest.yaml", "tenants/initech/billing/2026-11.md", "tenants/stray.txt"):
        store.write_bytes(key, b"x")
    children = store.list_children("tenants/")
    assert [(c.key, c.kind) for c in children] == [("tenants/acme", "folder"), ("tenants/initech", "folder"),
                                                   ("tenants/stray.txt", "file")]
    assert store.list_children("tenants/nobody/") == []
    with pytest.raises(ValueError, match="must name a folder"):
        store.list_children("tenants")
