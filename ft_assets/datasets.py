"""raw_dataset -> validated_dataset (pandera, blocking check) -> tokenized_dataset."""

import tempfile
from pathlib import Path

import polars as pl
from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetExecutionContext,
    MetadataValue,
    Output,
    asset,
)

from ft_assets.checks import check_spec, warning_check_results, warning_check_specs
from ft_assets.partition import fail_on_input, publish, tenant_job
from ft_assets.training import pool_calibration
from ftpipe.admission import serving_problems
from ftpipe.basemodel.registry import BaseModelNotFound, ResolvedBaseModel
from ftpipe.catalog.adapters import now_utc
from ftpipe.data.columns import ColumnMapping
from ftpipe.data.pipeline import (
    MIN_HOLDOUT_EXAMPLES,
    PREFLIGHT_COLUMNS,
    TemplateRefused,
    tokenize_to_parquet,
    validate_to_parquet,
)
from ftpipe.data.preflight import PREFLIGHT_WARNING_KINDS, run_preflight
from ftpipe.data.quality import WARNING_KINDS
from ftpipe.data.read import UnsupportedFormat
from ftpipe.data.report import report_json, report_markdown
from ftpipe.data.tokenize import TemplateSpansMismatch
from ftpipe.digests import combine, file_sha256
from ftpipe.landing import job_file_key, manifest_key
from ftpipe.manifest import MAX_MANIFEST_BYTES, ManifestError, parse_manifest
from ftpipe.metering.ledger import month_of
from ftpipe.metering.quota import decide_for_tenant
from ftpipe.objectstore import ObjectTooLarge, UnsafeObject
from ftpipe.records import RawDataset, TokenizedDataset, ValidatedDataset
from ftpipe.tenants import PlatformConfig, PoolConfig
from ftpipe.training.autoconfig import DoesNotFit
from ftpipe.training.cost import (
    RUNTIME_GRACE_SECONDS,
    RUNTIME_HEADROOM,
    calibrated_seconds,
    runtime_limit_seconds,
)
from ftpipe.training.plan import plan_training
from ftpipe.training.spec import TrainJobSpec
from partitions.run_tags import POOL_TAG, ROUTED_POOL_TAG
from partitions.tenant_jobs import tenant_jobs_partitions
from resources import (
    ArtifactStoreResource,
    BaseModelsResource,
    CatalogResource,
    LandingZoneResource,
    PlatformResource,
)


def _check_job_size(context: AssetExecutionContext, config: PlatformConfig, tenant: str, job: str,
                    estimated_gpu_hours: float, store) -> None:
    """The tier's cap on one job: a job planned far beyond it (a billion epochs, say) never starts."""
    tier_name = config.tenant(tenant).tier
    cap = config.tiers[tier_name].max_gpu_hours_per_job
    if cap is not None and estimated_gpu_hours > cap:
        raise fail_on_input(context, store, tenant, job, (
            f"the job is estimated at {estimated_gpu_hours:,.3g} GPU-hours; the {tier_name} tier allows at most "
            f"{cap:g} per job (see the training plan in validation.md: fewer epochs or max_steps, less data, "
            "or a smaller max_seq_len bring it down)"))


def _check_quota(context: AssetExecutionContext, catalog: CatalogResource, config: PlatformConfig, tenant: str,
                 job: str, estimated_gpu_hours: float, store) -> None:
    """The hard quota again, now with the job's estimate: a job that would cross it stops before the GPUs."""
    if config.tier_of(tenant).gpu_hours_per_month is None:
        return  # no quota: no need to read the ledger
    month = month_of(now_utc())
    decision = decide_for_tenant(config, tenant, catalog.ledger().charged_hours(month).get(tenant, 0.0), month,
                                 estimated_gpu_hours)
    if not decision.allowed:
        assert decision.message is not None  # a quota refusal always says why
        raise fail_on_input(context, store, tenant, job, decision.message)
    if decision.over_soft_quota:
        context.log.warning(decision.message)


@asset(partitions_def=tenant_jobs_partitions, group_name="dataset", kinds={"polars"})
def raw_dataset(context: AssetExecutionContext, landing: LandingZoneResource, artifacts: ArtifactStoreResource,
                platform: PlatformResource) -> Output[RawDataset]:
    """The tenant's manifest and data files, copied into an immutable content-addressed snapshot."""
    tenant, job = tenant_job(context)
    store = landing.store()
    key = manifest_key(tenant, job)
    try:
        manifest = parse_manifest(store.read_bytes(key, max_bytes=MAX_MANIFEST_BYTES), source=key)
    except (ManifestError, UnsafeObject, ObjectTooLarge) as exc:
        raise fail_on_input(context, store, tenant, job, str(exc)) from None
    files = {"train": manifest.dataset} | ({"eval": manifest.eval_dataset} if manifest.eval_dataset else {})
    max_bytes = int(platform.config().tier_of(tenant).max_upload_gb * 2**30)
    layout = artifacts.layout()
    incoming = layout.job_dir(tenant, job) / "incoming"
    incoming.mkdir(parents=True, exist_ok=True)
    # Download beside the snapshots so the final move is a rename on one filesystem.
    with tempfile.TemporaryDirectory(dir=incoming) as tmp:
        local = {}
        for role, name in files.items():
            field = "dataset" if role == "train" else "eval_dataset"
            try:
                if store.stat(job_file_key(tenant, job, name)) is None:
                    raise fail_on_input(context, store, tenant, job,
                                        f"{key}: field '{field}' names '{name}', which is not in the job folder")
                local[role] = Path(tmp) / name
                store.download(job_file_key(tenant, job, name), local[role], max_bytes=max_bytes)
            except (UnsafeObject, ObjectTooLarge, ValueError) as exc:  # ValueError: a name no store can hold
                raise fail_on_input(context, store, tenant, job, f"{key}: field '{field}': {exc}") from None
        digest = combine(*(f"{role}:{file_sha256(p)}" for role, p in sorted(local.items())))
        snapshot = layout.snapshot_dir(tenant, job, digest)
        snapshot.mkdir(parents=True, exist_ok=True)
        for p in local.values():
            target = snapshot / p.name
            if not target.exists():
                p.replace(target)
    value = RawDataset(tenant=tenant, job=job, manifest=manifest, dataset_digest=digest,
                       files={role: str(snapshot / name) for role, name in files.items()})
    return Output(value, metadata={
        "dataset_digest": digest,
        "files": MetadataValue.json(files),
        "bytes": sum((snapshot / n).stat().st_size for n in files.values()),
        "base_model": manifest.base_model,
    })


@asset(
    partitions_def=tenant_jobs_partitions, group_name="dataset", kinds={"polars", "pandera"},
    check_specs=[check_spec("schema", "validated_dataset", blocking=True,
                            description="pandera model of the normalized examples; errors block training")]
    + warning_check_specs("validated_dataset", WARNING_KINDS),
)
def validated_dataset(context: AssetExecutionContext, raw_dataset: RawDataset, landing: LandingZoneResource,
                      artifacts: ArtifactStoreResource, platform: PlatformResource):
    """Every record normalized to chat messages, split train/holdout by content hash, checked by pandera."""
    tenant, job, manifest = raw_dataset.tenant, raw_dataset.job, raw_dataset.manifest
    store = landing.store()
    out_dir = artifacts.layout().job_dir(tenant, job) / "validated"
    out_dir.mkdir(parents=True, exist_ok=True)
    mapping = ColumnMapping.from_manifest(manifest)
    # The same upload read under another columns: mapping is another dataset.
    suffix = f"-{mapping.digest()[:8]}" if mapping else ""
    out_file = out_dir / f"{raw_dataset.dataset_digest[:16]}{suffix}.parquet"

    logged = 0

    def progress(rows: int) -> None:
        nonlocal logged
        if rows - logged >= 100_000:
            logged = rows
            context.log.info(f"validation: read and checked {rows:,} records")

    try:
        check = validate_to_parquet(raw_dataset.files, manifest.holdout_fraction, out_file,
                                    manifest.min_examples, platform.config().tier_of(tenant).max_examples,
                                    manifest.objective, progress=progress, min_holdout=MIN_HOLDOUT_EXAMPLES,
                                    mapping=mapping)
    except UnsupportedFormat as exc:
        raise fail_on_input(context, store, tenant, job, str(exc)) from None
    outcome = check.outcome

    report_md = report_markdown(check, f"{tenant}/{job}")
    publish(store, tenant, job, "validation.md", report_md)
    report_key = publish(store, tenant, job, "validation.json", report_json(check))
    for line in outcome.error_lines()[:20]:
        context.log.error(line)
    for warning in check.warnings:
        context.log.warning(f"{warning.kind}: {warning}")

    # The checks first: a blocking failure then fails the step, and the partition shows failed, not materialized.
    yield AssetCheckResult(
        check_name="schema",
        passed=outcome.passed,
        severity=AssetCheckSeverity.ERROR,
        description=None if outcome.passed else "; ".join(outcome.error_lines()[:5]),
        metadata={"errors": outcome.n_errors,
                  "first_errors": MetadataValue.md("\n".join(f"- {e}" for e in outcome.error_lines()[:20]) or "none")},
    )
    yield from warning_check_results(check.warnings, WARNING_KINDS)
    if not outcome.passed:
        # The rows first: a file-level count ("too few valid examples") follows from them.
        first = "; ".join(([str(e) for e in outcome.errors] + outcome.dataset_errors)[:3])
        raise fail_on_input(context, store, tenant, job, (
            f"validation found {outcome.n_errors:,} error(s) in the upload (validation.md lists them): {first}"),
            report=None)
    yield Output(
        ValidatedDataset(**dict(raw_dataset), examples_file=str(out_file), check=check),
        metadata={**check.stats, "dagster/row_count": _parquet_rows(out_file), "errors": outcome.n_errors,
                  "warnings": sum(w.count for w in check.warnings),
                  "report": MetadataValue.md(report_md), "report_key": report_key},
    )


def _parquet_rows(path: Path) -> int:
    """From the file's footer: no row is read."""
    return int(pl.scan_parquet(path).select(pl.len()).collect().item())


def _tokenized_cache(context: AssetExecutionContext, validated_dataset: ValidatedDataset, base: ResolvedBaseModel,
                     artifacts: ArtifactStoreResource, store, max_len: int) -> tuple[Path, Path, str, bool]:
    """The train and held-out splits in the tenant's tokenized cache, tokenized now unless the same content
    through the same tokenizer and template is there already: (train file, held-out file, cache key, hit)."""
    from transformers import AutoTokenizer

    tenant, job, manifest = validated_dataset.tenant, validated_dataset.job, validated_dataset.manifest
    # Packing happens when training reads the cache, so packed and unpacked jobs share one entry.
    mapping = ColumnMapping.from_manifest(manifest)
    cache_key = combine(validated_dataset.dataset_digest, manifest.holdout_fraction, base.tokenizer_digest,
                        base.chat_template_digest, max_len, manifest.objective,
                        *([mapping.digest()] if mapping else []))
    cache_file = artifacts.layout().tokenized_cache(tenant, cache_key)
    holdout_file = artifacts.layout().tokenized_holdout_cache(tenant, cache_key)
    if cache_file.exists() and holdout_file.exists():  # (an entry from before held-out splits lacks the second)
        return cache_file, holdout_file, cache_key, True
    logged = 0

    def progress(done: int, total: int) -> None:
        nonlocal logged
        if done == total or done - logged >= 10_000:
            logged = done
            context.log.info(f"pre-flight: rendered and tokenized {done:,} of {total:,} examples")

    cache_file.parent.mkdir(parents=True, exist_ok=True)
    try:
        tokenize_to_parquet(AutoTokenizer.from_pretrained(base.path), validated_dataset.examples_file,
                            cache_file, max_len, manifest.objective, progress, eval_file=holdout_file)
    except TemplateRefused as exc:
        raise fail_on_input(context, store, tenant, job,
                            f"{exc}; the base model {manifest.base_model} cannot train on it as it is") from None
    except TemplateSpansMismatch as exc:
        raise fail_on_input(context, store, tenant, job, f"messages[].weight: {exc}; the base model "
                            f"{manifest.base_model} cannot honour message weights, remove them") from None
    return cache_file, holdout_file, cache_key, False


def _plan_and_preflight(context: AssetExecutionContext, store, validated_dataset: ValidatedDataset,
                        base: ResolvedBaseModel, cache_file: Path, holdout_file: Path, max_len: int, pool_name: str,
                        pool: PoolConfig):
    """The training plan for the pool (automatic hyperparameters, the memory estimate) and the pre-flight over
    the cache's token counts (statistics, too-long examples, the cost), read without loading the token ids."""
    tenant, job, manifest = validated_dataset.tenant, validated_dataset.job, validated_dataset.manifest
    stats_table = pl.read_parquet(cache_file, columns=PREFLIGHT_COLUMNS)
    try:
        # The ignore: polars types max() as any Python literal; of the integer n_tokens column it is an int.
        plan = plan_training(base.path, base.num_parameters, manifest.method, manifest.objective,
                             manifest.hyperparameters, str(cache_file), stats_table.height,
                             int(stats_table["n_tokens"].max() or 0), pool,  # type: ignore[arg-type]
                             eval_file=str(holdout_file))
    except DoesNotFit as exc:
        raise fail_on_input(context, store, tenant, job, f"manifest.yaml: {exc}") from None
    epochs = plan.spec.epochs_to_run(stats_table.height, pool.gpus_per_slot)
    preflight = run_preflight(stats_table, max_len, epochs, base.num_parameters, pool_name, pool)
    preflight.plan = plan.rows
    preflight.stats["estimated_memory_gb"] = round(plan.memory.total_gb, 3)
    for row in plan.rows:
        context.log.info(f"plan: {row['name']}={row['shown']} ({row['source']}: {row['reason']})")
    return plan, preflight


def _expected_seconds(context: AssetExecutionContext, estimated_gpu_hours: float, pool_name: str,
                      pool: PoolConfig) -> tuple[float, float, list]:
    """How long the finetune run should hold its slot (sensors.stages tags it; preemption spares runs that are
    far along): (the FLOP estimate, that estimate corrected by what the pool's recent trainings measured,
    startup included, and those trainings' figures)."""
    estimated_s = estimated_gpu_hours * 3600 / pool.gpus_per_slot
    calibration = pool_calibration(context.instance, pool_name)
    expected_s = calibrated_seconds(estimated_s, calibration)
    context.log.info(f"plan: expected {expected_s:.3g} s on {pool_name} (FLOP estimate {estimated_s:.3g} s, "
                     f"calibrated on {len(calibration)} recent training(s) of the pool)")
    return estimated_s, expected_s, calibration


@asset(
    partitions_def=tenant_jobs_partitions, group_name="dataset", kinds={"parquet"},
    check_specs=[check_spec("fits_max_seq_len", "tokenized_dataset", blocking=True,
                            description="every example fits max_seq_len after the chat template")]
    + warning_check_specs("tokenized_dataset", PREFLIGHT_WARNING_KINDS),
)
def tokenized_dataset(context: AssetExecutionContext, validated_dataset: ValidatedDataset,
                      base_models: BaseModelsResource, artifacts: ArtifactStoreResource, landing: LandingZoneResource,
                      platform: PlatformResource, catalog: CatalogResource):
    """The train split rendered through the base model's chat template with assistant masks, cached by content,
    and the held-out split beside it (the validation loss during training).

    The same table is the pre-flight: its token counts give the statistics, errors and cost estimate.
    """
    tenant, job, manifest = validated_dataset.tenant, validated_dataset.job, validated_dataset.manifest
    store = landing.store()
    try:
        base = base_models.registry().resolve(manifest.base_model)
    except BaseModelNotFound as exc:
        raise fail_on_input(context, store, tenant, job, f"manifest.yaml: field 'base_model': {exc}") from None
    config = platform.config()
    # Admission checked these already; a run launched by hand from the UI did not pass through it.
    unservable = serving_problems(manifest, config.serving, "manifest.yaml")
    if unservable:
        raise fail_on_input(context, store, tenant, job, "; ".join(unservable))
    max_len = int(manifest.hyperparameters.get("max_seq_len", TrainJobSpec.max_seq_len))
    cache_file, holdout_file, cache_key, hit = _tokenized_cache(context, validated_dataset, base, artifacts, store,
                                                                max_len)
    # The pool admission routed the job to; a hand launch of every asset at once holds it from the start.
    pool_name = context.run.tags.get(ROUTED_POOL_TAG) or context.run.tags.get(POOL_TAG) or config.default_pool
    pool = config.pools[pool_name]
    plan, preflight = _plan_and_preflight(context, store, validated_dataset, base, cache_file, holdout_file, max_len,
                                          pool_name, pool)

    check = validated_dataset.check
    report_md = report_markdown(check, f"{tenant}/{job}", preflight)
    publish(store, tenant, job, "validation.md", report_md)
    publish(store, tenant, job, "validation.json", report_json(check, preflight))
    for error in preflight.errors[:20]:
        context.log.error(str(error))
    yield AssetCheckResult(
        check_name="fits_max_seq_len", passed=preflight.passed, severity=AssetCheckSeverity.ERROR,
        description=None if preflight.passed else "; ".join(str(e) for e in preflight.errors[:5]),
        metadata={"too_long": preflight.n_errors},
    )
    yield from warning_check_results(preflight.warnings, PREFLIGHT_WARNING_KINDS)
    if not preflight.passed:
        raise fail_on_input(context, store, tenant, job, (
            f"{preflight.n_errors:,} example(s) do not fit max_seq_len={max_len} after the chat template "
            f"(validation.md lists them): {preflight.errors[0]}"), report=None)
    _check_job_size(context, config, tenant, job, preflight.stats["estimated_gpu_hours"], store)
    _check_quota(context, catalog, config, tenant, job, preflight.stats["estimated_gpu_hours"], store)
    estimated_s, expected_s, calibration = _expected_seconds(context, preflight.stats["estimated_gpu_hours"],
                                                              pool_name, pool)
    # The time limit stays on the uncalibrated estimate: it is part of the spec, whose hash names the training
    # folder, and a value that moves whenever another job finishes would hide a retry's checkpoints.
    plan.spec.max_runtime_seconds = runtime_limit_seconds(estimated_s)
    context.log.info(f"plan: max_runtime_seconds={plan.spec.max_runtime_seconds:g} (the estimate x "
                     f"{RUNTIME_HEADROOM:g} + {RUNTIME_GRACE_SECONDS:g} s)")

    yield Output(
        TokenizedDataset(**dict(validated_dataset), tokenized_file=str(cache_file), base_model=base,
                         spec=plan.spec.to_dict(), pool=pool_name, expected_seconds=expected_s,
                         data_warnings={w.kind: w.count for w in [*check.warnings, *preflight.warnings]}),
        metadata={**preflight.stats, "dagster/row_count": _parquet_rows(cache_file), "cache_hit": hit,
                  "cache_key": cache_key[:24], "base_model": base.short(),
                  "pool": pool_name, "estimated_seconds": float(f"{estimated_s:.3g}"),
                  "expected_seconds": float(f"{expected_s:.3g}"),
                  "calibration_runs": len(calibration), "report": MetadataValue.md(report_md)},
    )
