"""The pure logic must not depend on Dagster: it is usable and testable on its own."""

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def test_ftpipe_core_imports_no_dagster():
    modules = sorted(
        ".".join(p.relative_to(REPO_ROOT).with_suffix("").parts)
        for p in (REPO_ROOT / "ftpipe").rglob("*.py")
        if p.name != "__init__.py"
    )
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "bad = sorted(m for m in sys.modules if m == 'dagster' or m.startswith('dagster.'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"ftpipe modules pulled in Dagster: {out.stdout}"
    assert len(modules) > 15


def test_definitions_load():
    from dagster import Definitions

    from ft_assets.definitions import defs

    Definitions.validate_loadable(defs)
    job = defs.resolve_job_def("finetune")
    assert {n.name for n in job.graph.node_defs} >= {"raw_dataset", "validated_dataset", "adapter", "registered_adapter"}
    assert {s.name for s in defs.sensors} == {"upload_sensor", "resume_failed_runs", "preempt_for_premium",
                                              "requeue_preempted_runs"}
    assert {s.name for s in defs.schedules} >= {"billing_schedule", "golden_reevaluation_schedule",
                                                "checkpoint_retention_schedule", "adapter_retention_schedule",
                                                "refresh_serving_config_schedule"}


def test_a_partition_launched_by_hand_is_queued_with_the_pool_tier_and_priority_tags():
    """A platform engineer's Launchpad run carries only its partition; the instance's run coordinator gives it
    the tags a first attempt from the upload sensor has, so the same limits hold it."""
    from dagster import DagsterRunStatus, SubmitRunContext, instance_for_test
    from dagster._core.test_utils import create_run_for_test

    from tests.helpers.origins import finetune_origin

    with instance_for_test(overrides={"run_coordinator": {"module": "resources.run_coordinator",
                                                          "class": "PlatformRunCoordinator"}}) as instance:
        by_hand = create_run_for_test(instance, job_name="finetune", status=DagsterRunStatus.NOT_STARTED,
                                      remote_job_origin=finetune_origin(), tags={"dagster/partition": "acme__support-v1", "ftpipe/tenant": "acme"})
        queued = instance.run_coordinator.submit_run(SubmitRunContext(by_hand, workspace=None))
        assert queued.status == DagsterRunStatus.QUEUED
        assert {k: v for k, v in queued.tags.items() if k.startswith(("ftpipe/", "dagster/priority"))} == {
            "ftpipe/tenant": "acme", "ftpipe/job": "support-v1", "ftpipe/tier": "premium",
            "ftpipe/pool": "cpu-local", "dagster/priority": "10", "ftpipe/attempt": "1"}
        # A sensor's run keeps every tag it was given.
        tags = {"dagster/partition": "acme__support-v1", "ftpipe/pool": "h100x4", "ftpipe/attempt": "3"}
        routed = create_run_for_test(instance, job_name="finetune", status=DagsterRunStatus.NOT_STARTED,
                                     remote_job_origin=finetune_origin(), tags=tags)
        queued = instance.run_coordinator.submit_run(SubmitRunContext(routed, workspace=None))
        assert (queued.tags["ftpipe/pool"], queued.tags["ftpipe/attempt"]) == ("h100x4", "3")


def test_a_sensors_pool_attempt_and_priority_survive_the_partitions_own_tags():
    """Dagster merges a partition's tags over a run request's: the partition must not decide what sensors do."""
    from dagster import RunRequest, instance_for_test

    from ft_assets.definitions import defs

    job = defs.resolve_job_def("finetune")
    request = RunRequest(partition_key="acme__support-v1", tags={
        "ftpipe/pool": "h100x4", "ftpipe/attempt": "3", "dagster/priority": "10"})
    with instance_for_test() as instance:
        instance.add_dynamic_partitions("tenant_jobs", ["acme__support-v1"])
        resolved = request.with_resolved_tags_and_config(job, [], instance)
    assert {k: resolved.tags[k] for k in ("ftpipe/pool", "ftpipe/attempt", "dagster/priority", "ftpipe/tenant")} \
        == {"ftpipe/pool": "h100x4", "ftpipe/attempt": "3", "dagster/priority": "10", "ftpipe/tenant": "acme"}


def test_workspace_yaml_loads_through_the_dagster_cli(tmp_path):
    import os
    import shutil

    shutil.copy(REPO_ROOT / "dagster.yaml", tmp_path / "dagster.yaml")
    out = subprocess.run([str(Path(sys.executable).parent / "dagster"), "definitions", "validate", "-w", "workspace.yaml"],
                         cwd=REPO_ROOT, capture_output=True, text=True, env={**os.environ, "DAGSTER_HOME": str(tmp_path)})
    assert out.returncode == 0, out.stdout + out.stderr
