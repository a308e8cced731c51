"""What tenants get wrong on the landing zone, through the real upload sensor, on a local folder and on S3.

A manifest's version is its content: the same bytes written again start nothing once queued, changed bytes
queue a new run, and a refused version uploaded again is retried. A manifest that arrives before its data
waits for it, for a bounded time. A job folder with an invalid name is refused where its tenant can read it,
once. Each case has another tenant's good job beside it, which queues as usual.
"""

import hashlib
import json
import logging
import os
import re
import time
from pathlib import Path

import boto3
import pytest
from dagster import build_sensor_context, instance_for_test

import sensors.uploads
from ftpipe.landing import job_file_key, manifest_key, rejected_name_key, results_key
from ftpipe.objectstore import LocalObjectStore, S3ObjectStore, UnsafeObject
from ftpipe.submission import submit_job
from resources import BaseModelsResource, CatalogResource, LandingZoneResource, PlatformResource
from sensors.uploads import upload_sensor

pytestmark = pytest.mark.usefixtures("tiny_model")

DATA = b'{"prompt": "q", "completion": "a"}\n'
MANIFEST = b"base_model: ftpipe/tiny-llama\ndataset: train.jsonl\nmin_examples: 1\n"
WITH_EVAL = MANIFEST + b"eval_dataset: eval.jsonl\n"


class Sensor:
    """Ticks of the real sensor on one Dagster instance, each tick taking the cursor of the one before."""

    def __init__(self, instance, landing: LandingZoneResource, platform_file: Path, cursor: str | None = None):
        self.instance, self.cursor, self.logs = instance, cursor, []
        self.resources = {"landing": landing, "platform": PlatformResource(tenants_file=str(platform_file)),
                          "base_models": BaseModelsResource(cache_dir=os.environ["FTPIPE_MODEL_CACHE"]),
                          "catalog": CatalogResource(location=str(platform_file.parent / "catalog.duckdb"))}

    def tick(self):
        context = build_sensor_context(instance=self.instance, resources=self.resources, cursor=self.cursor)
        handler = _Collect(self.logs)
        context.log.addHandler(handler)
        try:
            result = upload_sensor(context)
        finally:
            context.log.removeHandler(handler)
        self.cursor = result.cursor
        return result

    def queued(self) -> list[str]:
        return sorted(r.partition_key for r in self.tick().run_requests)

    def said(self, words: str) -> int:
        return sum(words in message for _, message in self.logs)


class _Collect(logging.Handler):
    def __init__(self, into: list):
        super().__init__()
        self.into = into

    def emit(self, record):
        self.into.append((record.levelname, record.getMessage()))


def _upload_again(store, key: str, data: bytes) -> None:
    """What a tenant's client does: the object is written anew. S3's LastModified counts whole seconds, and a
    local mtime a few milliseconds: wait long enough for the write to be seen as a new one."""
    time.sleep(1.1 if isinstance(store, S3ObjectStore) else 0.05)
    store.write_bytes(key, data, overwrite=True)


def _good_job(store) -> None:
    submit_job(store, "initech", "good", {"train.jsonl": DATA}, MANIFEST)


def _entry(sensor: Sensor, key: str) -> dict:
    return json.loads(sensor.cursor)[key]


def test_the_same_bytes_written_again_start_nothing_and_are_read_once(landing, platform_file, monkeypatch):
    store = landing.store()
    submit_job(store, "acme", "j", {"train.jsonl": DATA}, MANIFEST)
    reads = []
    real_read = type(store).read_bytes
    monkeypatch.setattr(type(store), "read_bytes", lambda self, key, **kw: reads.append(key) or real_read(
        self, key, **kw))
    with instance_for_test() as instance:
        sensor = Sensor(instance, landing, platform_file)
        (first,) = sensor.tick().run_requests
        digest = hashlib.sha256(MANIFEST).hexdigest()
        assert first.tags["ftpipe/manifest-version"] == digest and digest in first.run_key
        assert _entry(sensor, "acme__j") | {"v": None} == {"v": None, "sha256": digest, "state": "queued"}

        assert sensor.queued() == [] and reads == [manifest_key("acme", "j")]  # unchanged: not even read

        listed = _entry(sensor, "acme__j")["v"]
        _upload_again(store, manifest_key("acme", "j"), MANIFEST)
        assert sensor.queued() == []  # read again, found the same bytes
        assert len(reads) == 2 and _entry(sensor, "acme__j")["v"] != listed
        assert _entry(sensor, "acme__j")["state"] == "queued"
        if isinstance(store, LocalObjectStore):  # a touch: only the mtime changes
            path = store.root / manifest_key("acme", "j")
            os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
            assert sensor.queued() == [] and len(reads) == 3
        assert sensor.queued() == []


def test_changed_bytes_queue_a_new_run_and_going_back_queues_again(landing, platform_file):
    store = landing.store()
    submit_job(store, "acme", "j", {"train.jsonl": DATA}, MANIFEST)
    changed = MANIFEST + b"hyperparameters: {epochs: 2}\n"
    with instance_for_test() as instance:
        sensor = Sensor(instance, landing, platform_file)
        (first,) = sensor.tick().run_requests
        _upload_again(store, manifest_key("acme", "j"), changed)
        (second,) = sensor.tick().run_requests
        assert second.tags["ftpipe/manifest-version"] == hashlib.sha256(changed).hexdigest()
        # Back to the first manifest: a new submission, under a run key Dagster has not seen.
        _upload_again(store, manifest_key("acme", "j"), MANIFEST)
        (third,) = sensor.tick().run_requests
        assert third.tags["ftpipe/manifest-version"] == first.tags["ftpipe/manifest-version"]
        assert len({first.run_key, second.run_key, third.run_key}) == 3


def test_a_manifest_before_its_data_waits_and_queues_when_the_data_arrives(landing, platform_file):
    store = landing.store()
    store.write_bytes(manifest_key("acme", "early"), WITH_EVAL)
    _good_job(store)
    with instance_for_test() as instance:
        sensor = Sensor(instance, landing, platform_file)
        first = sensor.tick()
        assert [r.partition_key for r in first.run_requests] == ["initech__good"]
        assert first.dynamic_partitions_requests[0].partition_keys == ["initech__good"]
        entry = _entry(sensor, "acme__early")
        assert entry["state"] == "waiting" and entry["needs"] == {"dataset": "train.jsonl",
                                                                  "eval_dataset": "eval.jsonl"}

        assert sensor.queued() == []
        store.write_bytes(job_file_key("acme", "early", "train.jsonl"), DATA)
        assert sensor.queued() == []  # eval.jsonl is still missing
        store.write_bytes(job_file_key("acme", "early", "eval.jsonl"), DATA)
        last = sensor.tick()
        assert [r.partition_key for r in last.run_requests] == ["acme__early"]
        assert last.dynamic_partitions_requests[0].partition_keys == ["acme__early"]
        assert sensor.queued() == []

    assert sensor.said("acme/early: waiting") == 1  # said once, not on every tick
    assert not store.list("tenants/acme/results/")  # and nothing written while it waited


def test_data_that_never_arrives_is_refused_by_name_and_an_upload_of_the_same_manifest_retries(
        landing, platform_file, monkeypatch):
    store = landing.store()
    store.write_bytes(manifest_key("acme", "late"), MANIFEST)
    _good_job(store)
    rejected = results_key("acme", "late", "rejected.md")
    with instance_for_test() as instance:
        sensor = Sensor(instance, landing, platform_file)
        assert sensor.queued() == ["initech__good"]
        assert sensor.queued() == [] and not store.exists(rejected)

        monkeypatch.setattr(sensors.uploads, "DATA_WAIT_SECONDS", 0.0)
        assert sensor.queued() == []
        reason = store.read_bytes(rejected).decode()
        assert "field 'dataset': names 'train.jsonl', which is not in the job folder" in reason
        assert _entry(sensor, "acme__late")["state"] == "refused"
        assert sensor.queued() == [] and sensor.said("refused acme/late") == 1

        # The tenant uploads the data, then the very same manifest: the refusal is retried, and is gone.
        store.write_bytes(job_file_key("acme", "late", "train.jsonl"), DATA)
        _upload_again(store, manifest_key("acme", "late"), MANIFEST)
        assert sensor.queued() == ["acme__late"]
        assert not store.exists(rejected)
        assert sensor.queued() == []


def test_a_waiting_manifest_keeps_its_clock_when_touched_and_restarts_it_when_changed(platform_file, tmp_path):
    landing = LandingZoneResource(url=str(tmp_path / "landing"))
    store = landing.store()
    store.write_bytes(manifest_key("acme", "j"), MANIFEST)
    with instance_for_test() as instance:
        sensor = Sensor(instance, landing, platform_file)
        sensor.tick()
        since = _entry(sensor, "acme__j")["since"]
        _upload_again(store, manifest_key("acme", "j"), MANIFEST)
        sensor.tick()
        assert _entry(sensor, "acme__j")["since"] == since
        _upload_again(store, manifest_key("acme", "j"), MANIFEST + b"holdout_fraction: 0.2\n")
        sensor.tick()
        assert _entry(sensor, "acme__j")["since"] > since
    assert sensor.said("acme/j: waiting") == 2  # once per version


def test_a_stale_refusal_is_removed_when_a_new_version_queues(landing, platform_file):
    store = landing.store()
    submit_job(store, "acme", "j", {"train.jsonl": DATA}, MANIFEST + b"hyperparameters: {lora_r: 128}\n")
    store.write_bytes(results_key("acme", "j", "validation.md"), b"an earlier run's report")
    _good_job(store)
    rejected = results_key("acme", "j", "rejected.md")
    with instance_for_test() as instance:
        sensor = Sensor(instance, landing, platform_file)
        assert sensor.queued() == ["initech__good"]
        assert "lora_r" in store.read_bytes(rejected).decode()
        _upload_again(store, manifest_key("acme", "j"), MANIFEST)
        assert sensor.queued() == ["acme__j"]
    assert not store.exists(rejected)
    assert store.read_bytes(results_key("acme", "j", "validation.md")) == b"an earlier run's report"


def test_a_refusal_that_cannot_be_removed_does_not_stop_the_queue(landing, platform_file, monkeypatch):
    store = landing.store()
    submit_job(store, "acme", "j", {"train.jsonl": DATA}, MANIFEST)
    store.write_bytes(results_key("acme", "j", "rejected.md"), b"old")

    def denied(self, key):
        raise PermissionError("AccessDenied: no s3:DeleteObject on results/")

    monkeypatch.setattr(type(store), "delete", denied)
    _good_job(store)
    with instance_for_test() as instance:
        sensor = Sensor(instance, landing, platform_file)
        assert sensor.queued() == ["acme__j", "initech__good"]
    assert sensor.said("could not remove the earlier refusal of acme/j") == 1


def test_invalid_names_are_refused_where_the_tenant_reads_once_per_version(landing, platform_file):
    store = landing.store()
    bad = {"Support V1": "tenants/acme/jobs/Support V1/manifest.yaml",
           "UPPER": "tenants/acme/jobs/UPPER/manifest.yaml"}
    for key in bad.values():
        store.write_bytes(key, MANIFEST)
    store.write_bytes("tenants/Acme/jobs/x/manifest.yaml", MANIFEST)  # an invalid tenant: nowhere to tell it
    _good_job(store)
    with instance_for_test() as instance:
        sensor = Sensor(instance, landing, platform_file)
        first = sensor.tick()
        assert [r.partition_key for r in first.run_requests] == ["initech__good"]
        for _ in range(3):
            assert sensor.queued() == []
        for job, key in bad.items():
            assert sensor.said(f"ignoring {key!r}") == 1
            report = store.read_bytes(rejected_name_key("acme", job)).decode()
            assert f"invalid job name {job!r}" in report and key in report
        # An invalid tenant folder is not even listed: said once, whatever it holds.
        assert sensor.said("ignoring 'tenants/Acme': invalid tenant name 'Acme'") == 1
        assert [o.key for o in store.list("tenants/")] == sorted(
            [*bad.values(), "tenants/Acme/jobs/x/manifest.yaml", *(rejected_name_key("acme", j) for j in bad),
             manifest_key("initech", "good"), job_file_key("initech", "good", "train.jsonl")])

        # A new version of it is refused, and said, again.
        _upload_again(store, bad["UPPER"], MANIFEST + b"# renamed soon\n")
        assert sensor.queued() == [] and sensor.said(f"ignoring {bad['UPPER']!r}") == 2


@pytest.mark.parametrize("folder", ["Support V1", "..", ".", "_rejected", "a" * 64, "ünïcödé", "\udcff",
                                    "-x", "x" * 255, "j.json", "my-job\n"])
def test_an_invalid_job_names_report_stays_in_its_tenants_area_and_apart_from_valid_jobs(folder):
    key = rejected_name_key("acme", folder)
    assert re.fullmatch(r"tenants/acme/results/_rejected/([a-z0-9]+(-[a-z0-9]+)*-)?[0-9a-f]{12}\.md", key), key
    assert rejected_name_key("acme", folder + " ") != key


def test_old_and_unreadable_cursors_do_not_crash_the_sensor(landing, platform_file):
    store = landing.store()
    submit_job(store, "acme", "j", {"train.jsonl": DATA}, MANIFEST)
    _good_job(store)
    # What the sensor wrote before content digests: the listing version (size-mtime, or the ETag) alone.
    old = json.dumps({"acme__j": {o.key: o for o in store.list("tenants/")}[manifest_key("acme", "j")].version})
    with instance_for_test() as instance:
        sensor = Sensor(instance, landing, platform_file, cursor=old)
        assert sensor.queued() == ["initech__good"]  # acme__j was decided before the upgrade: not queued again
        assert set(_entry(sensor, "acme__j")) == {"v"}  # its digest is unknown until it changes
        _upload_again(store, manifest_key("acme", "j"), MANIFEST + b"# v2\n")
        assert sensor.queued() == ["acme__j"]
        for cursor in ("not json", "[1, 2]", '{"acme__j": 5, "initech__good": {"v": 7}}', '{"acme__j": {}}', "null"):
            assert Sensor(instance, landing, platform_file, cursor=cursor).queued() == ["acme__j", "initech__good"]


def test_delete_removes_one_object_and_nothing_is_not_an_error(landing):
    store = landing.store()
    key = results_key("acme", "j", "rejected.md")
    for name in ("rejected.md", "rejected.md.keep", "other.md"):
        store.write_bytes(results_key("acme", "j", name), b"x")
    store.delete(key)
    store.delete(key)
    store.delete(results_key("acme", "missing", "rejected.md"))
    assert sorted(o.key for o in store.list("tenants/")) == [results_key("acme", "j", "other.md"),
                                                            results_key("acme", "j", "rejected.md.keep")]
    for bad in ("tenants/acme/../victim/x", "/etc/passwd", "tenants/acme/results/", ""):
        with pytest.raises(ValueError):
            store.delete(bad)


def test_local_delete_removes_a_link_never_its_target_and_never_deletes_through_one(tmp_path):
    store = LocalObjectStore(tmp_path / "landing")
    victim = tmp_path / "victim.md"
    victim.write_text("keep")
    store.write_bytes(results_key("acme", "j", "keep.md"), b"x")
    link = store.root / results_key("acme", "j", "rejected.md")
    link.symlink_to(victim)
    store.delete(results_key("acme", "j", "rejected.md"))
    assert not link.is_symlink() and victim.read_text() == "keep"

    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "rejected.md").write_text("keep")
    (store.root / "tenants/acme/results/k").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UnsafeObject, match="is a symbolic link"):
        store.delete(results_key("acme", "k", "rejected.md"))
    assert (tmp_path / "elsewhere" / "rejected.md").read_text() == "keep"

    (store.root / results_key("acme", "j", "dir.md")).mkdir()
    with pytest.raises(UnsafeObject, match="is a directory"):
        store.delete(results_key("acme", "j", "dir.md"))


def test_s3_delete_stays_under_the_stores_prefix(s3_endpoint, s3_bucket):
    client = boto3.client("s3", endpoint_url=s3_endpoint)
    client.put_object(Bucket=s3_bucket, Key="tenants/acme/results/j/rejected.md", Body=b"outside the prefix")
    store = S3ObjectStore(client, s3_bucket, "landing")
    store.write_bytes("tenants/acme/results/j/rejected.md", b"x")
    store.delete("tenants/acme/results/j/rejected.md")
    assert [o["Key"] for o in client.list_objects_v2(Bucket=s3_bucket)["Contents"]] == [
        "tenants/acme/results/j/rejected.md"]
