"""Monthly GPU-hour quotas at admission: a used-up hard quota refuses, a soft one queues and is flagged;
the pre-flight refuses a job whose estimate would cross a hard quota, before any GPU time."""

import os
from datetime import datetime, timedelta, timezone

from dagster import DagsterRunStatus, build_sensor_context, instance_for_test, materialize

from ft_assets.datasets import raw_dataset, tokenized_dataset, validated_dataset
from ftpipe import synthetic
from ftpipe.landing import results_key
from ftpipe.metering.ledger import UsageRecord
from ftpipe.submission import default_manifest, submit_job
from resources import BaseModelsResource, CatalogResource, LandingZoneResource, PlatformResource
from sensors.failures import failure_reason
from sensors.uploads import upload_sensor

PLATFORM = (
    "default_pool: cpu-local\n"
    "pools:\n  cpu-local: {gpu: cpu, gpu_memory_gb: 8, peak_tflops: 0.046, mfu: 1.0, price_per_gpu_hour: 1.0}\n"
    "tiers:\n"
    "  free: {priority: 0, gpu_hours_per_month: QUOTA, quota: hard}\n"
    "  standard: {priority: 5, gpu_hours_per_month: 1, quota: soft, overage_price_multiplier: 1.5}\n"
    "tenants:\n  initech: {tier: free}\n  globex: {tier: standard}\n"
)


def _used(catalog: CatalogResource, tenant: str, hours: float) -> None:
    now = datetime.now(timezone.utc)
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    catalog.ledger().record(UsageRecord.measure(f"earlier-{tenant}", tenant, "earlier", 1, "cpu-local", 1, 1.0, start,
                                                start + timedelta(hours=hours), "completed"))


def test_a_used_up_hard_quota_refuses_at_the_sensor_and_a_soft_one_queues_flagged(tmp_path):
    platform_file = tmp_path / "tenants.yaml"
    platform_file.write_text(PLATFORM.replace("QUOTA", "1"))
    landing = LandingZoneResource(url=str(tmp_path / "landing"))
    catalog = CatalogResource(location=str(tmp_path / "catalog.duckdb"))
    _used(catalog, "initech", 1.0)
    _used(catalog, "globex", 1.5)
    store = landing.store()
    for tenant in ("initech", "globex"):
        submit_job(store, tenant, "next", {"train.jsonl": b'{"prompt": "q", "completion": "a"}\n'},
                   default_manifest("train.jsonl"))
    resources = {"landing": landing, "platform": PlatformResource(tenants_file=str(platform_file)),
                 "base_models": BaseModelsResource(cache_dir=os.environ["FTPIPE_MODEL_CACHE"]), "catalog": catalog}
    with instance_for_test() as instance:
        result = upload_sensor(build_sensor_context(instance=instance, resources=resources))
    (queued,) = result.run_requests
    assert queued.partition_key == "globex__next" and queued.tags["ftpipe/over-quota"] == "soft"
    rejected = store.read_bytes(results_key("initech", "next", "rejected.md")).decode()
    assert "the free tier's quota is 1 GPU-hours per month and it is a hard limit: 1 GPU-hours used in" in rejected


def test_the_preflight_refuses_a_job_whose_estimate_crosses_a_hard_quota(local_resources, platform_file):
    # 0.6 of 1 GPU-second used; this job's estimate on the CPU pool is more than the 0.4 left.
    platform_file.write_text(PLATFORM.replace("QUOTA", f"{1 / 3600:.8f}"))
    _used(local_resources["catalog"], "initech", 0.6 / 3600)
    submit_job(local_resources["landing"].store(), "initech", "big",
               {"train.jsonl": synthetic.to_jsonl(synthetic.acme_support(120)).encode()},
               default_manifest("train.jsonl"))
    with instance_for_test() as instance:
        instance.add_dynamic_partitions("tenant_jobs", ["initech__big"])
        result = materialize([raw_dataset, validated_dataset, tokenized_dataset], partition_key="initech__big",
                             resources=local_resources, instance=instance, raise_on_error=False)
        run = instance.get_run_by_id(result.run_id)
        assert run.status == DagsterRunStatus.FAILURE
        error_class, reason = failure_reason(instance, run)
    assert error_class == "user"
    assert "hard limit" in reason and "estimated for this job" in reason
    store = local_resources["landing"].store()
    assert b"estimated for this job" in store.read_bytes(results_key("initech", "big", "rejected.md"))
    # The tenant still gets the validation report, with the estimate that crossed the quota.
    assert b"estimated" in store.read_bytes(results_key("initech", "big", "validation.md"))


def test_the_preflight_refuses_a_job_estimated_above_its_tiers_cap_per_job(local_resources, platform_file):
    """A per-job cap stops one huge job (a billion epochs once passed for premium tenants) before any GPU time;
    a job under it trains with a time limit of several times its estimate."""
    platform_file.write_text(PLATFORM.replace("QUOTA", "1000").replace(
        "quota: hard}", f"quota: hard, max_gpu_hours_per_job: {0.5 / 3600:.8f}}}"))
    store = local_resources["landing"].store()
    rows = synthetic.to_jsonl(synthetic.acme_support(120)).encode()
    submit_job(store, "initech", "big", {"train.jsonl": rows}, default_manifest("train.jsonl"))
    submit_job(store, "initech", "small", {"train.jsonl": rows},
               default_manifest("train.jsonl", hyperparameters={"max_steps": 1}))
    with instance_for_test() as instance:
        instance.add_dynamic_partitions("tenant_jobs", ["initech__big", "initech__small"])
        big = materialize([raw_dataset, validated_dataset, tokenized_dataset], partition_key="initech__big",
                          resources=local_resources, instance=instance, raise_on_error=False)
        error_class, reason = failure_reason(instance, instance.get_run_by_id(big.run_id))
        small = materialize([raw_dataset, validated_dataset, tokenized_dataset], partition_key="initech__small",
                            resources=local_resources, instance=instance)
    assert error_class == "user"
    assert "GPU-hours; the free tier allows at most 0.00013889 per job" in reason
    assert b"per job" in store.read_bytes(results_key("initech", "big", "rejected.md"))
    spec = small.output_for_node("tokenized_dataset").spec
    expected = float(small.get_asset_materialization_events()[-1].materialization.metadata["estimated_gpu_hours"]
                     .value) * 3600
    assert spec["max_runtime_seconds"] == round(expected * 4 + 900)
