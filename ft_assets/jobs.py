from dagster import AssetSelection, PartitionedConfig, define_asset_job, in_process_executor

from ftpipe.tenants import load_platform_config
from partitions.keys import parse_partition_key
from partitions.tenant_jobs import tenant_jobs_partitions
from partitions.run_tags import FINETUNE_JOB, partition_tags


def _tags_for_partition(partition_key: str) -> dict[str, str]:
    """Only the tags the partition decides. Dagster lets a partition's tags override a sensor's run request,
    so the pool, priority and attempt number come from the sensors; a run launched by hand gets them from
    the instance's run coordinator (resources/run_coordinator.py)."""
    from resources.settings import tenants_file

    tenant, job = parse_partition_key(partition_key)
    platform = load_platform_config(tenants_file())
    return partition_tags(platform, tenant, job)


# One run per tenant job. Steps run in the run worker's process: the heavy work already runs in its own
# trainer process through Pipes, so a process per step would only add start-up time. No run config: every
# asset reads what it needs from the job's manifest.
finetune_job = define_asset_job(
    FINETUNE_JOB,
    selection=AssetSelection.groups("dataset", "training", "evaluation", "registry"),
    partitions_def=tenant_jobs_partitions,
    executor_def=in_process_executor,
    config=PartitionedConfig(
        partitions_def=tenant_jobs_partitions,
        run_config_for_partition_key_fn=lambda _key: {},
        tags_for_partition_key_fn=_tags_for_partition,
    ),
)
