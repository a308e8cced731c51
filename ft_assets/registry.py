"""registered_adapter: a PEFT adapter directory vLLM can load, and its row in the DuckDB registry."""

import json
import shutil
from pathlib import Path

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetExecutionContext,
    MetadataValue,
    Output,
    TableColumn,
    TableRecord,
    TableSchema,
    asset,
)

from ft_assets.checks import check_spec
from ft_assets.partition import fail_on_input, publish, record_outcome
from ft_assets.serving import refresh_serving_files
from ftpipe.catalog.adapters import AdapterRecord, AdapterRegistry, now_utc
from ftpipe.catalog.serving import Compatibility, ServingProfile, check_adapter
from ftpipe.evaluation.advice import TrainingSummary, advise
from ftpipe.evaluation.gates import GateResult, evaluate_gates, gate_metrics, gates_markdown, parse_gates
from ftpipe.evaluation.intervals import LEVEL
from ftpipe.landing import results_key
from ftpipe.notify.outbox import write_notice
from ftpipe.records import EvaluatedAdapter, RegisteredAdapter
from partitions.tenant_jobs import tenant_jobs_partitions
from resources import (
    ArtifactStoreResource,
    BaseModelsResource,
    CatalogResource,
    LandingZoneResource,
    PlatformResource,
)

SERVED_FILES = ("adapter_config.json", "adapter_model.safetensors")
INTERVALS_KEPT = ("holdout_delta", "golden_exact_match_delta", "golden_perplexity_ratio")
"""Metrics recorded in the catalog with their intervals, beside every score's base and tuned values."""
GATES_SCHEMA = TableSchema(columns=[
    TableColumn("gate", "string"), TableColumn("source", "string", description="the platform's or the manifest's"),
    TableColumn("value", "float"), TableColumn("low", "float", description=f"of the {LEVEL:.0%} interval"),
    TableColumn("high", "float", description=f"of the {LEVEL:.0%} interval"),
    TableColumn("verdict", "string"), TableColumn("passed", "bool")])


@asset(partitions_def=tenant_jobs_partitions, group_name="registry", kinds={"sql"},
       check_specs=[check_spec("quality_gates", "registered_adapter", blocking=True,
                               description="the platform's and the manifest's quality gates on the evaluation"),
                    check_spec("serving_compatible", "registered_adapter", blocking=True,
                               description="the serving fleet (vLLM) can load this adapter on its base model")])
def registered_adapter(context: AssetExecutionContext, eval_report: EvaluatedAdapter, catalog: CatalogResource,
                       artifacts: ArtifactStoreResource, base_models: BaseModelsResource,
                       platform: PlatformResource, landing: LandingZoneResource):
    """Promoted when it passes its quality gates and the serving fleet can load it; otherwise registered as a
    draft, with the reasons and advice in ``quality_gates.md`` for the tenant.

    A failed gate or serving check fails the step after the draft is registered: the job did not produce a
    servable adapter, the partition shows failed at this stage, and the failure sensor reads the reason as
    the tenant's, so no retry. A run that resumed a finished training registers nothing new.
    """
    tenant, job = eval_report.tenant, eval_report.job
    platform_config = platform.config()  # read once: gates, serving profile and webhook come from it
    serving = _serving_check(context, eval_report, base_models, platform_config.serving)
    gates, advice = _quality_gates(eval_report, platform_config.evaluation.quality_gates)
    for line in advice:
        context.log.warning(f"advice: {line}")
    gates_passed = all(g.passed for g in gates)
    status = "promoted" if gates_passed and serving.compatible else "draft"

    registry = catalog.adapters()
    existing = registry.for_training(tenant, job, eval_report.spec_hash, eval_report.dataset_digest)
    if existing is not None:
        adapter_id, target, status = existing.adapter_id, Path(existing.path), existing.status
        context.log.info(f"this training is registered already, as {adapter_id} ({status}); nothing new is "
                         "registered and the tenant is not notified again")
        lora_rank = existing.lora_rank
    else:
        adapter_id = AdapterRegistry.new_adapter_id(tenant, job)
        target = artifacts.layout().registry_dir(tenant, adapter_id)
        lora_rank = _copy_served_files(eval_report, target)
    gates_md = gates_markdown(gates)
    publish(landing.store(), tenant, job, "quality_gates.md", _gates_report(tenant, job, adapter_id, status,
                                                                            gates_md, serving.problems, advice))
    if existing is None:
        registry.register(AdapterRecord(
            adapter_id=adapter_id, tenant=tenant, job=job, run_id=context.run.run_id,
            base_model=eval_report.base_model.model_id, base_digest=eval_report.base_model.digest,
            dataset_digest=eval_report.dataset_digest, config_hash=eval_report.spec_hash,
            method=eval_report.spec["method"], lora_rank=lora_rank, path=str(target),
            metrics=_recorded_metrics(eval_report), status=status, created_at=now_utc(),
        ))
        if status == "promoted":
            refresh_serving_files(catalog, artifacts)  # the fleet's --lora-modules list includes it from now on
        # Sent by a sensor once the run has ended (sensors/notifications.py), not from here: a slow endpoint
        # must not hold the run's slot.
        write_notice(artifacts.layout().run_dir(tenant, job, context.run.run_id),
                     "job.succeeded" if status == "promoted" else "job.gate_failed", {
            "job": job, "run_id": context.run.run_id, "adapter_id": adapter_id, "status": status,
            "gates": [g.to_dict() for g in gates], "serving_problems": serving.problems, "advice": advice,
            "reports": [results_key(tenant, job, name) for name in ("eval_report.md", "quality_gates.md")],
        })

    yield AssetCheckResult(
        check_name="quality_gates", passed=gates_passed, severity=AssetCheckSeverity.ERROR,
        description=None if gates_passed else "failed: " + ", ".join(str(g.gate) for g in gates if not g.passed),
        metadata={"gates": _gates_table(gates),
                  "how_sure": MetadataValue.md("\n".join(f"- {g.how_sure()}" for g in gates) or "no gates"),
                  "advice": MetadataValue.md("\n".join(f"- {a}" for a in advice) or "none")},
    )
    yield AssetCheckResult(
        check_name="serving_compatible", passed=serving.compatible, severity=AssetCheckSeverity.ERROR,
        description="; ".join(serving.problems) or None,
        metadata={"problems": MetadataValue.md("\n".join(f"- {p}" for p in serving.problems) or "none")},
    )
    if status != "promoted":
        failed = [f"quality gate {g.gate} failed ({_shown(g)})" for g in gates if not g.passed]
        failed += [f"not servable: {p}" for p in serving.problems]
        raise fail_on_input(context, landing.store(), tenant, job,
                            f"adapter {adapter_id} stays a draft: " + "; ".join(failed or ["not promoted"]),
                            report=None)
    record_outcome(context, f"promoted as {adapter_id}")
    yield Output(
        RegisteredAdapter(adapter_id=adapter_id, path=str(target), status=status, serving_problems=serving.problems),
        metadata={"adapter_id": adapter_id, "status": status, "path": MetadataValue.path(str(target)),
                  "vllm_lora_module": f"{adapter_id}={target}", "lora_rank": lora_rank},
    )


def _serving_check(context: AssetExecutionContext, eval_report: EvaluatedAdapter, base_models: BaseModelsResource,
                   serving_profile: ServingProfile) -> Compatibility:
    """Whether the serving fleet can load the adapter on its base model, and whether the smoke generation showed
    it answering (changed answers that stop at the end of the turn)."""
    trained_on = eval_report.base_model
    serving = check_adapter(eval_report.adapter_dir, base_models.registry().resolve(trained_on.model_id),
                            serving_profile, trained_on_digest=trained_on.digest)
    for problem in serving.problems:
        context.log.warning(f"not servable: {problem}")
    smoke = eval_report.eval.get("smoke", {})
    if not smoke.get("passed", False):
        serving.problems.append("smoke generation failed: " + (
            "the adapter does not change the base model's answers" if not smoke.get("differs")
            else "the tuned model does not stop at the end-of-turn token"))
    return serving


def _recorded_metrics(eval_report: EvaluatedAdapter) -> dict[str, float]:
    """The catalog's metrics: every score of the base and the tuned model, and the gated estimates' intervals."""
    metrics = {f"{r['task']}_{r['metric']}_{side}": r[side]
               for r in eval_report.eval["rows"] for side in ("base", "tuned")}
    estimates = gate_metrics(eval_report.eval)
    for name in INTERVALS_KEPT:
        if name in estimates:
            e = estimates[name]
            metrics |= {name: e.value, f"{name}_low": e.low, f"{name}_high": e.high}
    return metrics


def _gates_table(results: list[GateResult]) -> MetadataValue:
    return MetadataValue.table([TableRecord({
        "gate": str(r.gate), "source": r.gate.source, "value": r.value, "low": r.estimate.low,
        "high": r.estimate.high, "verdict": r.verdict, "passed": r.passed}) for r in results], schema=GATES_SCHEMA)


def _shown(result: GateResult) -> str:
    return f"{result.value:.3g}, {LEVEL:.0%} interval {result.estimate.low:.3g} to {result.estimate.high:.3g}"


def _copy_served_files(eval_report: EvaluatedAdapter, target: Path) -> int | None:
    """The adapter's served files into the registry, read-only; returns its LoRA rank."""
    target.mkdir(parents=True)
    for name in SERVED_FILES:
        shutil.copy2(f"{eval_report.adapter_dir}/{name}", target / name)
    # PEFT records the trainer's absolute local path; the served adapter names the base model by its id.
    config = json.loads((target / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = eval_report.base_model.model_id
    (target / "adapter_config.json").write_text(json.dumps(config, indent=2))
    for name in SERVED_FILES:
        (target / name).chmod(0o444)  # a registered adapter never changes; a new fine-tune is a new adapter
    return config.get("r")


def _quality_gates(eval_report: EvaluatedAdapter, platform_gates: dict[str, str]) -> tuple[list[GateResult], list[str]]:
    """The gates' results, and advice when any failed."""
    objective = eval_report.spec["objective"]
    gates = (parse_gates(platform_gates, "platform", objective)
             + parse_gates(eval_report.manifest.quality_gates, "manifest", objective))
    metrics = gate_metrics(eval_report.eval)
    results = evaluate_gates(gates, metrics)
    training = TrainingSummary.from_record(eval_report.training, eval_report.spec,
                                           n_train=eval_report.check.stats["train"],
                                           data_warnings=eval_report.data_warnings)
    return results, advise([r for r in results if not r.passed], {k: v.value for k, v in metrics.items()}, training)


def _gates_report(tenant: str, job: str, adapter_id: str, status: str, gates_md: str, problems: list[str],
                  advice: list[str]) -> str:
    lines = [f"# Quality gates of {tenant}/{job}", "", f"Adapter `{adapter_id}` is **{status}**.", "",
             f"Each metric is shown with its {LEVEL:.0%} interval: the range the score would fall in for most "
             "sets of such examples, from resampling the evaluated ones (the base and the tuned model in pairs). "
             "A gate on the held-out set passes only when the whole interval meets it: the gain must be shown. "
             "A gate on the golden set fails only when the whole interval misses it: the harm must be shown.",
             "", gates_md]
    if problems:
        lines += ["", "Serving checks:", "", *(f"- {p}" for p in problems)]
    if advice:
        lines += ["", "What to try:", "", *(f"- {a}" for a in advice)]
    return "\n".join(lines) + "\n"
