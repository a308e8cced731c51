"""A tenant job's two runs: the prepare run holds no GPU slot, and the stage sensor queues the finetune run with
the pool admission chose and the time the pre-flight expects, so that nothing tags a run while it runs."""

import yaml
from dagster import SkipReason, instance_for_test

from ft_assets.definitions import build_defs
from ftpipe import synthetic
from ftpipe.submission import default_manifest, submit_job
from ftpipe.tenants import load_platform_config
from partitions.run_tags import (
    ATTEMPT_TAG,
    CANCEL_REQUESTED_TAG,
    EXPECTED_SECONDS_TAG,
    MANIFEST_VERSION_TAG,
    POOL_TAG,
    PREPARED_BY_TAG,
    PRIORITY_TAG,
    ROUTED_POOL_TAG,
    STAGE_TAG,
    TIER_TAG,
    run_tags,
)
from tests.helpers.stages import finetune_request


def test_a_prepared_job_queues_its_gpu_run_with_the_routed_pool_and_the_preflights_time(local_resources,
                                                                                        platform_file, tiny_model):
    config = yaml.safe_load(platform_file.read_text())
    config["pools"]["big"] = {"gpu": "cpu", "gpu_memory_gb": 64, "gpus_per_slot": 2, "peak_tflops": 0.081,
                              "mfu": 1.0, "price_per_gpu_hour": 2.0}
    platform_file.write_text(yaml.safe_dump(config))
    store = local_resources["landing"].store()
    submit_job(store, "acme", "support-v1", {"t.jsonl": synthetic.to_jsonl(synthetic.acme_support(150)).encode()},
               default_manifest("t.jsonl"))
    defs = build_defs(local_resources)
    tags = {**run_tags(load_platform_config(platform_file), "acme", "support-v1", "big"), MANIFEST_VERSION_TAG: "v1"}
    with instance_for_test() as instance:
        instance.add_dynamic_partitions("tenant_jobs", ["acme__support-v1"])
        prepare = defs.resolve_job_def("prepare").execute_in_process(
            instance=instance, partition_key="acme__support-v1", tags=tags)
        preflight = prepare.asset_materializations_for_node("tokenized_dataset")[0].metadata
        request = finetune_request(instance, prepare.run_id)
        prepared = instance.get_run_by_id(prepare.run_id)
        # The CPU stage held no pool's slot, and nothing tagged it while it ran.
        assert POOL_TAG not in prepared.tags and EXPECTED_SECONDS_TAG not in prepared.tags
        assert prepared.tags[STAGE_TAG] == "prepare"

        # The pre-flight planned for the pool admission chose; the GPU run holds that pool's slot.
        assert preflight["pool"].value == "big"
        assert request.partition_key == "acme__support-v1"
        assert {k: request.tags[k] for k in (STAGE_TAG, POOL_TAG, ATTEMPT_TAG, PREPARED_BY_TAG, MANIFEST_VERSION_TAG,
                                             TIER_TAG, PRIORITY_TAG)} == {
            STAGE_TAG: "finetune", POOL_TAG: "big", ATTEMPT_TAG: "1", PREPARED_BY_TAG: prepare.run_id,
            MANIFEST_VERSION_TAG: "v1", TIER_TAG: "premium", PRIORITY_TAG: "10"}
        assert request.tags[EXPECTED_SECONDS_TAG] == f"{max(preflight['expected_seconds'].value, 1):.0f}"
        assert ROUTED_POOL_TAG not in request.tags
        # The sensor's request resolves against the finetune job with its tags intact.
        resolved = request.with_resolved_tags_and_config(defs.resolve_job_def("finetune"), [], instance)
        assert resolved.tags[POOL_TAG] == "big" and resolved.tags[EXPECTED_SECONDS_TAG]

        # A job cancelled between its stages gets no GPU run.
        instance.add_run_tags(prepare.run_id, {CANCEL_REQUESTED_TAG: "true"})
        skipped = finetune_request(instance, prepare.run_id)
    assert isinstance(skipped, SkipReason) and "cancelled" in skipped.skip_message


def test_the_gpu_runs_tags_carry_the_jobs_and_drop_the_first_stages_own():
    from partitions.run_tags import finetune_tags

    prepare = {"ftpipe/tenant": "acme", "ftpipe/stage": "prepare", "ftpipe/routed-pool": "big", "ftpipe/attempt": "2",
               "ftpipe/outcome": "x", "ftpipe/expected-seconds": "5", "dagster/priority": "10",
               "dagster/partition": "acme__j", "other/tag": "kept out"}
    tags = finetune_tags(prepare, "big", 12.4, "run-1")
    assert tags == {"ftpipe/tenant": "acme", "ftpipe/stage": "finetune", "ftpipe/pool": "big",
                    "ftpipe/attempt": "1", "ftpipe/prepared-by": "run-1", "ftpipe/expected-seconds": "12",
                    "dagster/priority": "10"}
    # No usable estimate, no tag: preemption reads a missing one as "just started", never a bogus number.
    for bad in (float("nan"), float("inf")):
        assert "ftpipe/expected-seconds" not in finetune_tags(prepare, "big", bad, "run-1")
