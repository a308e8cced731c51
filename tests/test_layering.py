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
    assert {s.name for s in defs.sensors} == {"upload_sensor", "resume_failed_runs", "notify_succeeded_jobs",
                                              "preempt_for_premium",
                                              "requeue_preempted_runs", "status_files"}
    assert {s.name for s in defs.schedules} >= {"billing_schedule", "golden_reevaluation_schedule",
                                                "checkpoint_retention_schedule", "adapter_retention_schedule",
                                                "refresh_serving_config_schedule"}


def test_the_coordinators_tenant_job_assets_are_the_assets_partitioned_by_tenant_job():
    from ft_assets.definitions import ASSETS
    from partitions.tenant_jobs import tenant_jobs_partitions
    from resources.run_coordinator import TENANT_JOB_ASSETS

    assert TENANT_JOB_ASSETS == {a.key.to_user_string() for a in ASSETS if a.partitions_def == tenant_jobs_partitions}


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
