import os

import boto3
from dagster import SensorResult, build_sensor_context, instance_for_test

from ftpipe.landing import manifest_key, results_key
from ftpipe.submission import default_manifest, submit_job
from resources import BaseModelsResource, CatalogResource, LandingZoneResource, PlatformResource
from sensors.uploads import upload_sensor


def _tick(instance, landing, platform_file, cursor=None) -> SensorResult:
    resources = {"landing": landing, "platform": PlatformResource(tenants_file=str(platform_file)),
                 "base_models": BaseModelsResource(cache_dir=os.environ["FTPIPE_MODEL_CACHE"]),
                 "catalog": CatalogResource(location=str(platform_file.parent / "catalog.duckdb"))}
    return upload_sensor(build_sensor_context(instance=instance, resources=resources, cursor=cursor))


def _submit(store, tenant, job, lr=None):
    manifest = default_manifest("train.jsonl", **({"hyperparameters": {"learning_rate": lr}} if lr else {}))
    submit_job(store, tenant, job, {"train.jsonl": b'{"prompt": "q", "completion": "a"}\n'}, manifest)


def test_new_manifest_adds_partition_and_queues_one_run_with_tier_tags(landing, platform_file):
    store = landing.store()
    _submit(store, "acme", "support-v1")
    _submit(store, "initech", "helpdesk-v1")
    with instance_for_test() as instance:
        result = _tick(instance, landing, platform_file)
        (add,) = result.dynamic_partitions_requests
        assert sorted(add.partition_keys) == ["acme__support-v1", "initech__helpdesk-v1"]
        runs = {r.partition_key: r for r in result.run_requests}
        assert set(runs) == {"acme__support-v1", "initech__helpdesk-v1"}
        acme = runs["acme__support-v1"].tags
        # The first stage: CPU work that names the pool its GPU stage will hold, holding none itself.
        assert (acme["ftpipe/tenant"], acme["ftpipe/tier"], acme["ftpipe/routed-pool"], acme["dagster/priority"],
                acme["ftpipe/stage"]) == ("acme", "premium", "cpu-local", "10", "prepare")
        assert "ftpipe/pool" not in acme
        assert runs["initech__helpdesk-v1"].tags["dagster/priority"] == "0"

        # The same manifests seen again: no new partition, no second run.
        again = _tick(instance, landing, platform_file, cursor=result.cursor)
        assert again.run_requests == [] and again.dynamic_partitions_requests == []


def test_resubmitted_manifest_queues_a_new_run(tmp_path, platform_file):
    landing = LandingZoneResource(url=str(tmp_path / "landing"))
    store = landing.store()
    _submit(store, "acme", "support-v1")
    with instance_for_test() as instance:
        first = _tick(instance, landing, platform_file)
        # A tenant replaces its manifest by deleting and re-uploading it (uploads are never overwritten by us).
        (tmp_path / "landing" / manifest_key("acme", "support-v1")).unlink()
        store.write_bytes(manifest_key("acme", "support-v1"),
                          b"base_model: ftpipe/tiny-llama\ndataset: train.jsonl\nmin_examples: 1\n")
        second = _tick(instance, landing, platform_file, cursor=first.cursor)
        assert [r.partition_key for r in second.run_requests] == ["acme__support-v1"]
        assert second.run_requests[0].run_key != first.run_requests[0].run_key


def test_invalid_names_and_unknown_tenants_start_nothing(landing, platform_file):
    store = landing.store()
    store.write_bytes("tenants/Bad_Name/jobs/x/manifest.yaml", b"base_model: m\ndataset: t.jsonl\n")
    _submit(store, "umbrella", "job-1")  # valid name, but not a tenant of this platform
    with instance_for_test() as instance:
        result = _tick(instance, landing, platform_file)
    assert result.run_requests == [] and result.dynamic_partitions_requests == []
    assert b"not configured" in store.read_bytes(results_key("umbrella", "job-1", "rejected.md"))
    # No key is built from an invalid tenant name: its refusal is a log line only.
    assert [o.key for o in store.list("tenants/Bad_Name/")] == ["tenants/Bad_Name/jobs/x/manifest.yaml"]


def test_sensor_sees_uploads_made_with_plain_boto3(s3_endpoint, s3_bucket, platform_file):
    """A tenant who only has the bucket uploads with any S3 client."""
    client = boto3.client("s3", endpoint_url=s3_endpoint)
    client.put_object(Bucket=s3_bucket, Key="tenants/acme/jobs/j1/train.jsonl", Body=b"{}\n")
    client.put_object(Bucket=s3_bucket, Key="tenants/acme/jobs/j1/manifest.yaml",
                      Body=b"base_model: ftpipe/tiny-llama\ndataset: train.jsonl\n")
    landing = LandingZoneResource(url=f"s3://{s3_bucket}", endpoint_url=s3_endpoint, region_name="us-east-1")
    with instance_for_test() as instance:
        result = _tick(instance, landing, platform_file)
    assert [r.partition_key for r in result.run_requests] == ["acme__j1"]


def test_a_job_that_fits_no_pool_is_refused_with_its_estimate_and_never_queues(landing, tmp_path, tiny_model):
    small = tmp_path / "small-pools.yaml"
    small.write_text("default_pool: tiny-gpu\n"
                     "pools:\n  tiny-gpu: {gpu: T4, gpu_memory_gb: 1, peak_tflops: 65}\n"
                     "tiers:\n  premium: {priority: 10}\ntenants:\n  acme: {tier: premium}\n")
    store = landing.store()
    _submit(store, "acme", "too-big")
    with instance_for_test() as instance:
        result = _tick(instance, landing, small)
        assert result.run_requests == [] and result.dynamic_partitions_requests == []
        again = _tick(instance, landing, small, cursor=result.cursor)
        assert again.run_requests == []  # refused once, not re-evaluated every tick
    reason = store.read_bytes(results_key("acme", "too-big", "rejected.md")).decode()
    # The size comes from the registered base; the tiny model's vocabulary follows its pre-training corpus.
    size = f"{tiny_model.num_parameters / 1e9:.3g}B"
    assert f"the job fits no GPU pool: tiny-gpu: lora of a {size}-parameter model at 512 tokens" in reason
    assert ("needs 1.5 GB per GPU even at micro-batch 1 with activation checkpointing; "
            "the pool's GPUs have 1 GB") in reason
