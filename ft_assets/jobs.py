from dagster import AssetSelection, define_asset_job, in_process_executor

from partitions.tenant_jobs import tenant_jobs_partitions

# One run per tenant job. Steps run in the run worker's process: the heavy work already runs in its own
# trainer process through Pipes, so a process per step would only add start-up time.
finetune_job = define_asset_job(
    "finetune",
    selection=AssetSelection.groups("dataset", "training", "evaluation", "registry"),
    partitions_def=tenant_jobs_partitions,
    executor_def=in_process_executor,
)
