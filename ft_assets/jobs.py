import os

from dagster import AssetSelection, PartitionedConfig, define_asset_job, in_process_executor

from ftpipe.tenants import load_platform_config
from partitions.keys import parse_partition_key
from partitions.tenant_jobs import tenant_jobs_partitions
from sensors.run_tags import run_tags


def _tags_for_partition(partition_key: str) -> dict[str, str]:
    """The same tenant, tier, pool and priority tags the upload sensor sets, for runs launched from the UI."""
    from resources.settings import REPO_ROOT

    tenant, job = parse_partition_key(partition_key)
    platform = load_platform_config(os.environ.get("FTPIPE_TENANTS", REPO_ROOT / "tenants.yaml"))
    return run_tags(platform, tenant, job)


# One run per tenant job. Steps run in the run worker's process: the heavy work already runs in its own
# trainer process through Pipes, so a process per step would only add start-up time. No run config: every
# asset reads what it needs from the job's manifest.
finetune_job = define_asset_job(
    "finetune",
    selection=AssetSelection.groups("dataset", "training", "evaluation", "registry"),
    partitions_def=tenant_jobs_partitions,
    executor_def=in_process_executor,
    config=PartitionedConfig(
        partitions_def=tenant_jobs_partitions,
        run_config_for_partition_key_fn=lambda _key: {},
        tags_for_partition_key_fn=_tags_for_partition,
    ),
)
