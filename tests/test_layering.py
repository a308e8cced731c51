"""The layers: the pure logic (``ftpipe``) knows nothing of Dagster, and nothing below the CLI imports it.

    ftpipe_cli                        the operator's commands: may import anything
    ftpipe_api, sensors               the services: never the CLI
    ft_assets                         the assets and jobs: never the sensors (but definitions.py, which
                                      assembles everything)
    resources, partitions             resources, partitions and run tags: neither assets nor sensors
    ftpipe (+ partitions.keys)        the training and data logic: never Dagster, nor any layer above
"""

import ast
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ftpipe", "ftpipe_api", "ftpipe_cli", "ft_assets", "sensors", "resources", "partitions")
# dagster_pipes is not among them: the trainer processes report to Dagster through it, without Dagster.
ABOVE_THE_CORE = ("dagster", "dagster_aws", "dagster_k8s", "dagster_postgres", "dagster_graphql", "dagster_webserver",
                  *(p for p in PACKAGES if p != "ftpipe"))


def _imports(path: Path) -> set[str]:
    """Every module a file imports, at its top or inside a function (lazy imports count too)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _violations(files, forbidden: tuple[str, ...], allowed: tuple[str, ...] = ()) -> list[str]:
    return sorted(f"{path.relative_to(REPO_ROOT)} imports {name}" for path in files for name in _imports(path)
                  if name.split(".")[0] in forbidden and name not in allowed)


def test_the_core_imports_neither_dagster_nor_any_layer_above_it():
    core = [*(REPO_ROOT / "ftpipe").rglob("*.py"), REPO_ROOT / "partitions" / "keys.py"]
    assert len(core) > 60
    assert _violations(core, ABOVE_THE_CORE, allowed=("partitions.keys",)) == []


def test_nothing_but_the_cli_imports_the_cli():
    below = [path for package in PACKAGES if package != "ftpipe_cli" for path in (REPO_ROOT / package).rglob("*.py")]
    assert _violations(below, ("ftpipe_cli",)) == []


def test_assets_and_resources_import_no_sensor_and_resources_no_asset():
    assets = [p for p in (REPO_ROOT / "ft_assets").rglob("*.py") if p.name != "definitions.py"]
    below = [*(REPO_ROOT / "resources").rglob("*.py"), *(REPO_ROOT / "partitions").rglob("*.py")]
    assert _violations(assets, ("sensors",)) == []
    assert _violations(below, ("sensors", "ft_assets")) == []


def test_the_scan_sees_lazy_imports(tmp_path):
    (tmp_path / "m.py").write_text("def f():\n    from dagster import asset\n    import ftpipe_cli.main\n")
    assert _imports(tmp_path / "m.py") == {"dagster", "ftpipe_cli.main"}


def test_definitions_load():
    from dagster import Definitions

    from ft_assets.definitions import defs

    Definitions.validate_loadable(defs)
    # A tenant job's two stages: only the second holds a GPU slot.
    assert {n.name for n in defs.resolve_job_def("prepare").graph.node_defs} == {
        "raw_dataset", "validated_dataset", "tokenized_dataset"}
    assert {n.name for n in defs.resolve_job_def("finetune").graph.node_defs} == {
        "adapter", "eval_report", "registered_adapter"}
    assert {s.name for s in defs.sensors} == {"upload_sensor", "queue_finetune_runs", "resume_failed_runs",
                                              "notify_succeeded_jobs", "preempt_for_premium",
                                              "requeue_preempted_runs", "status_files"}
    assert {s.name for s in defs.schedules} >= {"billing_schedule", "golden_reevaluation_schedule",
                                                "checkpoint_retention_schedule", "adapter_retention_schedule",
                                                "refresh_serving_config_schedule"}


def test_assets_that_read_another_assets_output_show_it_as_lineage():
    from dagster import AssetKey

    from ft_assets.definitions import defs

    graph = defs.resolve_asset_graph()
    upstream = {key: {k.to_user_string() for k in graph.get(AssetKey(key)).parent_keys}
                for key in ("vllm_serving_config", "golden_reevaluation", "monthly_billing", "registered_adapter")}
    assert upstream == {"vllm_serving_config": {"registered_adapter"}, "golden_reevaluation": {"registered_adapter"},
                        "monthly_billing": {"adapter"}, "registered_adapter": {"eval_report"}}


def test_the_coordinators_tenant_job_assets_are_the_assets_partitioned_by_tenant_job():
    from ft_assets.definitions import ASSETS
    from partitions.tenant_jobs import tenant_jobs_partitions
    from resources.run_coordinator import PREPARE_ASSETS, TENANT_JOB_ASSETS

    assert TENANT_JOB_ASSETS == {a.key.to_user_string() for a in ASSETS if a.partitions_def == tenant_jobs_partitions}
    assert PREPARE_ASSETS == {a.key.to_user_string() for a in ASSETS if a.group_names_by_key and
                              set(a.group_names_by_key.values()) == {"dataset"}}


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
    out = subprocess.run([str(Path(sys.executable).parent / "dagster"), "definitions", "validate",
                          "-w", "workspace.yaml"],
                         cwd=REPO_ROOT, capture_output=True, text=True,
                         env={**os.environ, "DAGSTER_HOME": str(tmp_path)})
    assert out.returncode == 0, out.stdout + out.stderr
