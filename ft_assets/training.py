"""adapter: LoRA SFT in a separate trainer process launched through Dagster Pipes."""

import json

from dagster import AssetExecutionContext, MetadataValue, Output, asset

from ftpipe.digests import combine
from ftpipe.training.spec import resolve_spec
from partitions.tenant_jobs import tenant_jobs_partitions
from resources import ArtifactStoreResource, TrainerLauncherResource


@asset(partitions_def=tenant_jobs_partitions, group_name="training", kinds={"pytorch"})
def adapter(context: AssetExecutionContext, tokenized_dataset: dict, trainer: TrainerLauncherResource,
            artifacts: ArtifactStoreResource) -> Output[dict]:
    """A LoRA adapter trained with TRL + PEFT; loss and throughput stream back as logs and metadata."""
    tenant, job = tokenized_dataset["tenant"], tokenized_dataset["job"]
    manifest = tokenized_dataset["manifest"]
    spec = resolve_spec(tokenized_dataset["base_model"]["path"], tokenized_dataset["tokenized_file"],
                        manifest["method"], manifest["hyperparameters"])
    spec_hash = combine(json.dumps(spec.to_dict(), sort_keys=True), tokenized_dataset["base_model"]["digest"])
    spec.output_dir = str(artifacts.layout().training_dir(tenant, job, spec_hash))
    context.log.info(f"training {spec.method} on {tokenized_dataset['base_model']['model_id']}: {spec.to_dict()}")
    invocation = trainer.run(context, "ftpipe.training.pipes_main", extras={"spec": spec.to_dict()})
    reported = invocation.get_materialize_result().metadata or {}
    adapter_dir = f"{spec.output_dir}/adapter"
    return Output(
        {**tokenized_dataset, "adapter_dir": adapter_dir, "spec": spec.to_dict(), "spec_hash": spec_hash},
        metadata={**reported, "spec": MetadataValue.json(spec.to_dict())},
    )
