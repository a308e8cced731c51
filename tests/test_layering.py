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


def test_a_partition_launched_by_hand_gets_the_quota_and_priority_tags():
    """A platform engineer's Launchpad run of a partition is queued under the same limits as a sensor's."""
    from ft_assets.definitions import defs

    tags = defs.resolve_job_def("finetune").partitioned_config.get_tags_for_partition_key("acme__support-v1")
    assert {k: tags[k] for k in ("ftpipe/tenant", "ftpipe/tier", "dagster/priority")} == {
        "ftpipe/tenant": "acme", "ftpipe/tier": "premium", "dagster/priority": "10"}


def test_workspace_yaml_loads_through_the_dagster_cli(tmp_path):
    import os
    import shutil

    shutil.copy(REPO_ROOT / "dagster.yaml", tmp_path / "dagster.yaml")
    out = subprocess.run([str(Path(sys.executable).parent / "dagster"), "definitions", "validate", "-w", "workspace.yaml"],
                         cwd=REPO_ROOT, capture_output=True, text=True, env={**os.environ, "DAGSTER_HOME": str(tmp_path)})
    assert out.returncode == 0, out.stdout + out.stderr
