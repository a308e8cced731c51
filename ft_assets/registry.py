"""registered_adapter: a PEFT adapter directory vLLM can load, and its row in the DuckDB registry."""

import json
import shutil

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    MetadataValue,
    Output,
    asset,
)

from ft_assets.serving import refresh_serving_files
from ftpipe.catalog.adapters import AdapterRecord, AdapterRegistry, now_utc
from ftpipe.catalog.serving import check_adapter
from partitions.tenant_jobs import tenant_jobs_partitions
from resources import ArtifactStoreResource, BaseModelsResource, CatalogResource, PlatformResource

SERVED_FILES = ("adapter_config.json", "adapter_model.safetensors")


@asset(partitions_def=tenant_jobs_partitions, group_name="registry", kinds={"duckdb"},
       check_specs=[AssetCheckSpec("serving_compatible", asset="registered_adapter",
                                   description="the serving fleet (vLLM) can load this adapter on its base model")])
def registered_adapter(context: AssetExecutionContext, eval_report: dict, catalog: CatalogResource,
                       artifacts: ArtifactStoreResource, base_models: BaseModelsResource,
                       platform: PlatformResource):
    """Promoted when the tuned adapter beats the base on the held-out set and the serving fleet can load it;
    otherwise kept as a draft, with the reasons."""
    tenant, job = eval_report["tenant"], eval_report["job"]
    trained_on = eval_report["base_model"]
    serving = check_adapter(eval_report["adapter_dir"], base_models.registry().resolve(trained_on["model_id"]),
                            platform.config().serving, trained_on_digest=trained_on["digest"])
    for problem in serving.problems:
        context.log.warning(f"not servable: {problem}")
    adapter_id = AdapterRegistry.new_adapter_id(tenant, job)
    target = artifacts.layout().registry_dir(tenant, adapter_id)
    target.mkdir(parents=True)
    for name in SERVED_FILES:
        shutil.copy2(f"{eval_report['adapter_dir']}/{name}", target / name)
    # PEFT records the trainer's absolute local path; the served adapter names the base model by its id.
    config = json.loads((target / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = eval_report["base_model"]["model_id"]
    (target / "adapter_config.json").write_text(json.dumps(config, indent=2))
    for name in SERVED_FILES:
        (target / name).chmod(0o444)  # a registered adapter never changes; a new fine-tune is a new adapter

    holdout = next(r for r in eval_report["eval"]["rows"] if r["task"] == "holdout")
    smoke = eval_report["eval"].get("smoke", {})
    if not smoke.get("passed", False):
        serving.problems.append("smoke generation failed: " + (
            "the adapter does not change the base model's answers" if not smoke.get("differs")
            else "the tuned model does not stop at the end-of-turn token"))
    status = "promoted" if holdout["tuned"] > holdout["base"] and serving.compatible else "draft"
    metrics = {f"{r['task']}_{r['metric']}_{side}": r[side] for r in eval_report["eval"]["rows"] for side in ("base", "tuned")}
    catalog.adapters().register(AdapterRecord(
        adapter_id=adapter_id, tenant=tenant, job=job, run_id=context.run_id,
        base_model=eval_report["base_model"]["model_id"], base_digest=eval_report["base_model"]["digest"],
        dataset_digest=eval_report["dataset_digest"], config_hash=eval_report["spec_hash"],
        method=eval_report["spec"]["method"], lora_rank=config.get("r"), path=str(target), metrics=metrics,
        status=status, created_at=now_utc(),
    ))
    if status == "promoted":
        refresh_serving_files(catalog, artifacts)  # the fleet's --lora-modules list includes it from now on
    yield Output(
        {"adapter_id": adapter_id, "path": str(target), "status": status, "serving_problems": serving.problems},
        metadata={"adapter_id": adapter_id, "status": status, "path": MetadataValue.path(str(target)),
                  "vllm_lora_module": f"{adapter_id}={target}", "lora_rank": config.get("r")},
    )
    yield AssetCheckResult(
        check_name="serving_compatible", passed=serving.compatible, severity=AssetCheckSeverity.ERROR,
        description="; ".join(serving.problems) or None,
        metadata={"problems": MetadataValue.md("\n".join(f"- {p}" for p in serving.problems) or "none")},
    )
