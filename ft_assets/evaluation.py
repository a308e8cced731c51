"""eval_report: lm-eval over the tenant's held-out split and the platform's golden set, base vs tuned."""

import json
from pathlib import Path
from typing import cast

import polars as pl
from dagster import (
    AssetExecutionContext,
    MarkdownMetadataValue,
    MetadataValue,
    Output,
    TableColumn,
    TableRecord,
    TableSchema,
    asset,
)

from ft_assets.gpu import run_on_pool
from ft_assets.partition import publish
from ftpipe.landing import results_key
from ftpipe.records import EvaluatedAdapter, TrainedAdapter
from ftpipe.training.plots import as_markdown, curve_from_record
from partitions.tenant_jobs import tenant_jobs_partitions
from resources import (
    ArtifactStoreResource,
    CatalogResource,
    LandingZoneResource,
    PlatformResource,
    TrainerLauncherResource,
)

CURVE_FILE = "loss_curve.png"
SCORES_SCHEMA = TableSchema(columns=[
    TableColumn("task", "string", description="holdout: the tenant's held-out split; golden: the platform's set"),
    TableColumn("metric", "string"), TableColumn("base", "float"), TableColumn("tuned", "float"),
    TableColumn("change", "float", description="tuned minus base; for perplexity, tuned over base"),
    TableColumn("change_low", "float"), TableColumn("change_high", "float"),
    TableColumn("higher_is_better", "bool")])


@asset(partitions_def=tenant_jobs_partitions, group_name="evaluation", kinds={"lm-eval"})
def eval_report(context: AssetExecutionContext, adapter: TrainedAdapter, trainer: TrainerLauncherResource,
                artifacts: ArtifactStoreResource, landing: LandingZoneResource,
                platform: PlatformResource, catalog: CatalogResource) -> Output[EvaluatedAdapter]:
    tenant, job = adapter.tenant, adapter.job
    run_dir = artifacts.layout().run_dir(tenant, job, context.run.run_id)
    run_dir.mkdir(parents=True, exist_ok=True)
    holdout_file = run_dir / "holdout.parquet"
    pl.read_parquet(adapter.examples_file).filter(pl.col("split") == "holdout").write_parquet(holdout_file)
    config = platform.config()
    invocation = run_on_pool(context, trainer, catalog, adapter.pool, config.pools[adapter.pool],
                             "ftpipe.evaluation.pipes_main", extras={
        "base_model_path": adapter.base_model.path, "adapter_dir": adapter.adapter_dir,
        "holdout_file": str(holdout_file), "work_dir": str(run_dir / "eval"),
        "objective": adapter.spec["objective"], "golden_set": config.evaluation.golden_set,
    }, processes=1)
    reported = dict(invocation.get_materialize_result().metadata or {})
    report = json.loads((Path(run_dir) / "eval" / "eval_report.json").read_text())
    # pipes_main reports "report" as markdown, which arrives as a MarkdownMetadataValue; Dagster types a result's
    # metadata as any of the raw values a materialization may carry.
    table = cast(MarkdownMetadataValue, reported["report"]).value if "report" in reported else ""
    store = landing.store()
    # The curves beside the scores: a validation loss that turned up shows overfitting before any score does.
    curve = curve_from_record(adapter.training, run_dir / CURVE_FILE)
    store.write_bytes(results_key(tenant, job, CURVE_FILE), curve.read_bytes(), overwrite=True)
    summary = "".join(f"- {line}\n" for line in [*report.get("summary", []), *_training_summary(adapter.training)])
    publish(store, tenant, job, "eval_report.md",
            f"# Evaluation of {tenant}/{job}\n\nBase model `{adapter.base_model.model_id}` vs the tuned "
            f"adapter on {report['n_holdout']} held-out examples and the platform's golden set of "
            f"{report['n_golden']} general questions (`{report['golden_set_digest'][:12]}`). Intervals are "
            f"{report['confidence_level']:.0%} intervals from resampling the examples, the two models in pairs."
            f"\n\n{summary}\n{table}\n\n![training and validation loss]({CURVE_FILE})\n")
    # The tenant's copy names the base model by id and holds no platform paths.
    published = {**{k: v for k, v in report.items() if k != "adapter_dir"},
                 "base_model": adapter.base_model.model_id}
    publish(store, tenant, job, "eval_report.json", json.dumps(published, indent=2))
    return Output(EvaluatedAdapter(**dict(adapter), eval=report), metadata={
        **reported, "report": MetadataValue.md(table), "scores": _scores_table(report),
        "golden_set_digest": report["golden_set_digest"],
        "n_golden": report["n_golden"], "loss_curve": MetadataValue.md(as_markdown(curve))})


def _scores_table(report: dict) -> MetadataValue:
    """Each metric of ``eval_report.json``, base and tuned, with the change and its interval."""
    records = []
    for row in report["rows"]:
        if row["metric"] == "perplexity":
            ratio = report["estimates"][f"{row['task']}_perplexity_ratio"]
            change = (ratio["value"], ratio["low"], ratio["high"])
        else:
            change = (row["delta"], *row["intervals"]["delta"])
        records.append(TableRecord({"task": row["task"], "metric": row["metric"], "base": row["base"],
                                    "tuned": row["tuned"], "change": change[0], "change_low": change[1],
                                    "change_high": change[2], "higher_is_better": row["higher_is_better"]}))
    return MetadataValue.table(records, schema=SCORES_SCHEMA)


def _training_summary(training: dict) -> list[str]:
    """Which weights were evaluated, read off the validation curve, in words."""
    history = training.get("eval_history") or []
    if not history:
        return ["No validation loss was measured during training (no held-out split); the adapter is the last "
                "step's weights."]
    best_step, last_step = training.get("best_step"), training["steps"]
    line = (f"Validation loss on the held-out split, {len(history)} evaluations: from {history[0][1]:.3f} at step "
            f"{history[0][0]} to a lowest {training['best_eval_loss']:.3f} at step {best_step}, "
            f"{history[-1][1]:.3f} at the last evaluation (step {history[-1][0]}); the adapter evaluated here holds "
            f"the weights of step {training['selected_step']} of {last_step} ({training['checkpoint_selection']})")
    if training.get("early_stopped"):
        line += ", and training stopped early when the validation loss stopped improving"
    return [line + "."]
