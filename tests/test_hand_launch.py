"""Runs of a tenant job launched by hand (the UI, GraphQL, the CLI) go through the instance's run coordinator:
refused before they queue when there is nothing to run, otherwise routed and numbered like the sensor's."""

import pytest
import yaml
from dagster import (
    DagsterEventType,
    DagsterRunStatus,
    SkipReason,
    build_run_status_sensor_context,
    instance_for_test,
)
from dagster._core.test_utils import create_run_for_test

from ftpipe import synthetic
from ftpipe.objectstore import LocalObjectStore
from ftpipe.submission import default_manifest, submit_job
from resources import ArtifactStoreResource, CatalogResource, PlatformResource
from resources.run_coordinator import LaunchRefused
from sensors.failures import resume_failed_runs
from tests.helpers.origins import finetune_code_origin, finetune_origin

COORDINATOR = {"run_coordinator": {"module": "resources.run_coordinator", "class": "PlatformRunCoordinator"}}


@pytest.fixture
def home(tmp_path, monkeypatch, platform_file):
    """The environment the webserver and daemon read resources from, with a second, bigger pool."""
    config = yaml.safe_load(platform_file.read_text())
    config["pools"]["big"] = {"gpu": "cpu", "gpu_memory_gb": 64, "peak_tflops": 0.081, "mfu": 1.0,
                              "price_per_gpu_hour": 2.0}
    platform_file.write_text(yaml.safe_dump(config))
    monkeypatch.setenv("FTPIPE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("FTPIPE_TENANTS", str(platform_file))
    return LocalObjectStore(tmp_path / "home" / "landing")


def _submit(instance, tags, job_name="finetune", asset_selection=None):
    origin_job = job_name if job_name in ("prepare", "finetune") else "finetune"
    run = create_run_for_test(instance, job_name=job_name, status=DagsterRunStatus.NOT_STARTED,
                              remote_job_origin=finetune_origin(origin_job),
                              job_code_origin=finetune_code_origin(origin_job), tags=tags,
                              asset_selection=asset_selection)
    return run, lambda: instance.submit_run(run.run_id, workspace=None)


def _upload(store, tenant="acme", job="support-v1", **manifest):
    submit_job(store, tenant, job, {"t.jsonl": synthetic.to_jsonl(synthetic.acme_support(20)).encode()},
               default_manifest("t.jsonl", **manifest))


def test_a_hand_launch_is_routed_tagged_and_numbered_like_the_sensors_runs(home):
    _upload(home)
    with instance_for_test(overrides=COORDINATOR) as instance:
        run, submit = _submit(instance, {"dagster/partition": "acme__support-v1"})
        queued = submit()
        assert queued.status == DagsterRunStatus.QUEUED
        assert {k: v for k, v in queued.tags.items() if k.startswith(("ftpipe/", "dagster/priority"))} == {
            "ftpipe/tenant": "acme", "ftpipe/job": "support-v1", "ftpipe/tier": "premium",
            "ftpipe/pool": "cpu-local", "dagster/priority": "10", "ftpipe/attempt": "1", "ftpipe/kind": "tenant-job",
            "ftpipe/stage": "finetune"}
        # The second and third hand launches of the same partition are the next attempts, not attempt 1 again.
        assert submit_again(instance).tags["ftpipe/attempt"] == "2"
        assert submit_again(instance).tags["ftpipe/attempt"] == "3"
        # A sensor's run keeps every tag it was given.
        tags = {"dagster/partition": "acme__support-v1", "ftpipe/pool": "big", "ftpipe/attempt": "7"}
        routed = _submit(instance, tags)[1]()
        assert (routed.tags["ftpipe/pool"], routed.tags["ftpipe/attempt"]) == ("big", "7")


def test_a_hand_launch_of_cpu_work_names_the_pool_and_holds_no_slot(home):
    from dagster import AssetKey

    _upload(home)
    with instance_for_test(overrides=COORDINATOR) as instance:
        prepare = _submit(instance, {"dagster/partition": "acme__support-v1"}, job_name="prepare")[1]()
        # Re-validating from the UI (the implicit asset job, dataset assets only) is CPU work too.
        revalidate = _submit(instance, {"dagster/partition": "acme__support-v1"}, job_name="__ASSET_JOB",
                             asset_selection={AssetKey("raw_dataset"), AssetKey("validated_dataset")})[1]()
        # Training from the UI holds the slot; attempts are numbered per job.
        train = _submit(instance, {"dagster/partition": "acme__support-v1"})[1]()
        again = _submit(instance, {"dagster/partition": "acme__support-v1"}, job_name="prepare")[1]()
    for run in (prepare, revalidate):
        assert (run.tags["ftpipe/stage"], run.tags["ftpipe/routed-pool"]) == ("prepare", "cpu-local")
        assert "ftpipe/pool" not in run.tags
    assert (train.tags["ftpipe/stage"], train.tags["ftpipe/pool"], train.tags["ftpipe/attempt"]) == (
        "finetune", "cpu-local", "1")
    assert again.tags["ftpipe/attempt"] == "2"


def submit_again(instance):
    return _submit(instance, {"dagster/partition": "acme__support-v1"})[1]()


def test_a_hand_launch_goes_to_the_pool_the_sensor_would_route_it_to(home, platform_file):
    # The default pool's slots made too small for the job: admission routes it to the bigger pool.
    config = yaml.safe_load(platform_file.read_text())
    config["pools"]["cpu-local"]["gpu_memory_gb"] = 0.001
    platform_file.write_text(yaml.safe_dump(config))
    _upload(home)
    with instance_for_test(overrides=COORDINATOR) as instance:
        queued = _submit(instance, {"dagster/partition": "acme__support-v1"})[1]()
    assert queued.tags["ftpipe/pool"] == "big"


@pytest.mark.parametrize("tags, asset_selection, reason", [
    ({"dagster/partition": "acme__does-not-exist"}, None, "has no upload"),
    ({}, None, "needs a partition"),
    ({"dagster/partition": "nobody__job"}, None, "tenant 'nobody' is not configured"),
    ({"dagster/partition": "Acme__x"}, None, "partition 'Acme__x'"),
    # The UI's Materialize button launches the implicit asset job with the assets selected.
    ({}, ["validated_dataset"], "needs a partition"),
    ({"dagster/partition": "acme__does-not-exist"}, ["raw_dataset", "validated_dataset"], "has no upload"),
])
def test_a_launch_with_nothing_to_run_is_refused_before_it_queues(home, tags, asset_selection, reason,
                                                                  platform_file, tmp_path):
    from dagster import AssetKey

    _upload(home)
    with instance_for_test(overrides=COORDINATOR) as instance:
        run, submit = _submit(instance, tags, job_name="finetune" if asset_selection is None else "__ASSET_JOB",
                              asset_selection={AssetKey(a) for a in asset_selection} if asset_selection else None)
        with pytest.raises(LaunchRefused, match=reason):
            submit()
        refused = instance.get_run_by_id(run.run_id)
        # Failed, never queued, and marked as the user's error so that the failure sensor does not retry it.
        assert refused.status == DagsterRunStatus.FAILURE
        assert refused.tags["ftpipe/error-class"] == "user"
        assert refused.tags["ftpipe/outcome"].startswith("[user] refused:")
        # Nor does it tell the tenant anything: the launch was an operator's.
        event = next(iter(instance.all_logs(run.run_id, of_type=DagsterEventType.RUN_FAILURE))).dagster_event
        skipped = resume_failed_runs(build_run_status_sensor_context(
            sensor_name=resume_failed_runs.name, dagster_instance=instance, dagster_run=refused, dagster_event=event,
            resources={"platform": PlatformResource(tenants_file=str(platform_file)),
                       "catalog": CatalogResource(location=str(tmp_path / "c.duckdb")),
                       "artifacts": ArtifactStoreResource(root=str(tmp_path / "a"))}).for_run_failure())
        assert isinstance(skipped, SkipReason) and "refused at launch" in skipped.skip_message
        # Another tenant's launch still goes through.
        ok = _submit(instance, {"dagster/partition": "acme__support-v1"})[1]()
        assert ok.status == DagsterRunStatus.QUEUED


def test_a_hand_launch_of_a_job_the_sensor_would_refuse_is_refused_with_the_sensors_reason(home):
    _upload(home, base_model="nobody/unregistered-7b")
    with instance_for_test(overrides=COORDINATOR) as instance:
        with pytest.raises(LaunchRefused, match="base_model"):
            _submit(instance, {"dagster/partition": "acme__support-v1"})[1]()


def test_the_platforms_own_runs_are_maintenance_and_go_first(home):
    from dagster import AssetKey

    with instance_for_test(overrides=COORDINATOR) as instance:
        run, submit = _submit(instance, {}, job_name="__ASSET_JOB", asset_selection={AssetKey("vllm_serving_config")})
        queued = submit()
    assert queued.status == DagsterRunStatus.QUEUED
    assert (queued.tags["ftpipe/kind"], queued.tags["dagster/priority"]) == ("maintenance", "100")
