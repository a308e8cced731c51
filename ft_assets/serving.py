"""vllm_serving_config: what the multi-LoRA fleet loads, rewritten from the registry's promoted adapters."""

from pathlib import Path

from dagster import (
    AllPartitionMapping,
    AssetDep,
    AssetExecutionContext,
    DefaultScheduleStatus,
    MaterializeResult,
    MetadataValue,
    ScheduleDefinition,
    asset,
    define_asset_job,
)

from ftpipe.catalog.vllm import rewrite_from_registry
from resources import ArtifactStoreResource, CatalogResource


def serving_dir(artifacts: ArtifactStoreResource) -> Path:
    return Path(artifacts.root) / "serving"


def refresh_serving_files(catalog: CatalogResource, artifacts: ArtifactStoreResource):
    return rewrite_from_registry(catalog.adapters(), serving_dir(artifacts))


# The registry's rows are what it serves; a tenant job's registration changes them (lineage only: the asset
# reads the catalog, whichever jobs are registered).
@asset(group_name="serving", kinds={"vllm"},
       deps=[AssetDep("registered_adapter", partition_mapping=AllPartitionMapping())])
def vllm_serving_config(context: AssetExecutionContext, catalog: CatalogResource,
                        artifacts: ArtifactStoreResource) -> MaterializeResult:
    """Per base model: ``--max-lora-rank`` and ``--lora-modules`` for vLLM, in ``$FTPIPE_ARTIFACTS/serving/``."""
    configs = refresh_serving_files(catalog, artifacts)
    return MaterializeResult(metadata={
        "base_models": len(configs),
        "adapters": sum(len(c.lora_modules) for c in configs),
        "vllm_args": MetadataValue.md("\n\n".join(f"`vllm serve {c.base_model} {' '.join(c.args())}`"
                                                  for c in configs) or "no promoted adapters"),
    })


refresh_serving_job = define_asset_job("refresh_serving_config", selection=[vllm_serving_config])

# Registration rewrites the files too; the schedule also picks up deprecations and heals concurrent writes.
serving_schedule = ScheduleDefinition(job=refresh_serving_job, cron_schedule="*/10 * * * *",
                                      default_status=DefaultScheduleStatus.RUNNING)
