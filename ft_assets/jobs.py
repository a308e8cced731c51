from dagster import AssetSelection, PartitionedConfig, define_asset_job, in_process_executor

from ftpipe.tenants import load_platform_config
from partitions.keys import parse_partition_key
from partitions.run_tags import FINETUNE_JOB, PREPARE_JOB, partition_tags
from partitions.tenant_jobs import tenant_jobs_partitions


def _tags_for_partition(partition_key: str) -> dict[str, str]:
    """Only the tags the partition decides. Dagster lets a partition's tags override a sensor's run request,
    so the pool, priority and attempt number come from the sensors; a run launched by hand gets them from
    the instance's run coordinator (resources/run_coordinator.py)."""
    from resources.settings import tenants_file

    tenant, job = parse_partition_key(partition_key)
    platform = load_platform_config(tenants_file())
    return partition_tags(platform, tenant, job)


def _tenant_job(name: str, groups: tuple[str, ...]):
    # Steps run in the run worker's process: the heavy work already runs in its own trainer process through
    # Pipes, so a process per step would only add start-up time. No run config: every asset reads what it
    # needs from the job's manifest.
    return define_asset_job(
        name,
        selection=AssetSelection.groups(*groups),
        executor_def=in_process_executor,
        config=PartitionedConfig(
            partitions_def=tenant_jobs_partitions,
            run_config_for_partition_key_fn=lambda _key: {},
            tags_for_partition_key_fn=_tags_for_partition,
        ),
    )


# A tenant job is two runs, so that a GPU slot is held only while GPUs work: prepare (validation,
# tokenization, the pre-flight) queues under a CPU limit; finetune (training, evaluation, registration)
# under its pool's slot, requested by sensors.stages with the pool and time the pre-flight settled. One job
# with a concurrency pool per step could not do it: an asset's pool is fixed where it is defined, while the
# GPU pool a job needs is decided per job, and the run would still be launched, and wait, as a whole.
prepare_job = _tenant_job(PREPARE_JOB, ("dataset",))
finetune_job = _tenant_job(FINETUNE_JOB, ("training", "evaluation", "registry"))
