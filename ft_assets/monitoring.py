"""golden_reevaluation: every promoted adapter scored again on the golden set each night, against its
registration-time scores, to catch base-model drift and adapters that no longer hold up."""

import json
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

from dagster import (
    AllPartitionMapping,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetDep,
    AssetExecutionContext,
    DefaultScheduleStatus,
    MaterializeResult,
    MetadataValue,
    RunRequest,
    ScheduleEvaluationContext,
    TableColumn,
    TableRecord,
    TableSchema,
    asset,
    define_asset_job,
    schedule,
)

from ft_assets.gpu import run_on_pool
from ftpipe.evaluation.reeval import GoldenRun, Reevaluation, compare_with_registration
from partitions.run_tags import POOL_TAG
from resources import (
    ArtifactStoreResource,
    BaseModelsResource,
    CatalogResource,
    PlatformResource,
    TrainerLauncherResource,
)

REEVALUATION_SCHEMA = TableSchema(columns=[
    TableColumn("adapter_id", "string"), TableColumn("tenant", "string"), TableColumn("base_model", "string"),
    TableColumn("exact_match_base", "float"), TableColumn("exact_match_tuned", "float", description="tonight"),
    TableColumn("registered_exact_match_tuned", "float", description="when it was registered"),
    TableColumn("regression", "float", description="golden exact match the adapter loses against its base, tonight"),
    TableColumn("regression_low", "float"), TableColumn("regression_high", "float"),
    TableColumn("holds_up", "bool")])


@asset(group_name="monitoring", kinds={"lm-eval"},
       deps=[AssetDep("registered_adapter", partition_mapping=AllPartitionMapping())],
       check_specs=[AssetCheckSpec("promoted_adapters_hold_up", asset="golden_reevaluation",
                                   description="no promoted adapter moved on the golden set or lost its base model")])
def golden_reevaluation(context: AssetExecutionContext, catalog: CatalogResource, base_models: BaseModelsResource,
                        platform: PlatformResource, trainer: TrainerLauncherResource,
                        artifacts: ArtifactStoreResource):
    """Findings are a warning for the operator (``ftpipe deprecate`` takes an adapter out of service);
    the report is ``reevaluations/{date}.json`` under the artifacts root."""
    config = platform.config()
    promoted = [r for r in catalog.adapters().list() if r.status == "promoted"]
    registry = base_models.registry()
    groups: dict[str, list] = defaultdict(list)
    for record in promoted:
        groups[record.base_model].append(record)
    bases = {model_id: registry.resolve(model_id) for model_id in groups}
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H%M%S")
    work_dir = Path(artifacts.root) / "reevaluations" / stamp
    results, digest = [], ""
    if promoted:
        work_dir.mkdir(parents=True, exist_ok=True)
        run_on_pool(context, trainer, catalog, config.default_pool, config.pools[config.default_pool],
                    "ftpipe.evaluation.reeval_main", extras={
            "groups": [{"base_model_path": bases[m].path, "adapters": {r.adapter_id: r.path for r in records}}
                       for m, records in groups.items()],
            "work_dir": str(work_dir), "golden_set": config.evaluation.golden_set}, processes=1)
        scores = json.loads((work_dir / "golden_scores.json").read_text())
        digest = scores["golden_set_digest"]
        for (model_id, records), group in zip(groups.items(), scores["groups"]):
            run = GoldenRun.from_dict(group)
            for record in records:
                results.append(compare_with_registration(
                    record.adapter_id, record.tenant, model_id, record.metrics, record.base_digest,
                    bases[model_id].digest, run.samples(record.adapter_id),
                    config.evaluation.quality_gates, config.evaluation.reeval_tolerance))
        (work_dir.parent / f"{stamp}.json").write_text(json.dumps(
            {"golden_set_digest": digest, "adapters": [r.to_dict() for r in results]}, indent=2))
    flagged = [r for r in results if not r.holds_up]
    for r in flagged:
        context.log.warning(f"{r.adapter_id} ({r.tenant}): {'; '.join(r.findings)}")
    findings = [f"{r.adapter_id}: {f}" for r in flagged for f in r.findings]
    return MaterializeResult(
        metadata={"adapters": len(results), "flagged": len(flagged), "dagster/row_count": len(results),
                  "golden_set_digest": digest, "report": _reevaluation_table(results),
                  "findings": MetadataValue.md("\n".join(f"- {f}" for f in findings) or "none")},
        check_results=[AssetCheckResult(
            check_name="promoted_adapters_hold_up", passed=not flagged, severity=AssetCheckSeverity.WARN,
            description="; ".join(findings)[:2000] or None,
            metadata={"flagged": MetadataValue.json([r.adapter_id for r in flagged])})],
    )


def _reevaluation_table(results: list[Reevaluation]) -> MetadataValue:
    return MetadataValue.table([TableRecord({
        "adapter_id": r.adapter_id, "tenant": r.tenant, "base_model": r.base_model,
        "exact_match_base": r.exact_match_base, "exact_match_tuned": r.exact_match_tuned,
        "registered_exact_match_tuned": r.registered_exact_match_tuned, "regression": r.regression,
        "regression_low": r.regression_interval[0], "regression_high": r.regression_interval[1],
        "holds_up": r.holds_up}) for r in results], schema=REEVALUATION_SCHEMA)


golden_reevaluation_job = define_asset_job("golden_reevaluation_nightly", selection=[golden_reevaluation])


@schedule(job=golden_reevaluation_job, cron_schedule="0 2 * * *", default_status=DefaultScheduleStatus.RUNNING)
def golden_reevaluation_schedule(context: ScheduleEvaluationContext, platform: PlatformResource):
    """Nightly, on a GPU slot of the default pool like any other GPU work, so the queue's limits apply."""
    return RunRequest(run_key=f"golden-{context.scheduled_execution_time:%Y-%m-%d}",
                      tags={POOL_TAG: platform.config().default_pool})
