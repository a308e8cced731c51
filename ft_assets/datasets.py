"""raw_dataset -> validated_dataset (pandera, blocking check) -> tokenized_dataset."""

import tempfile
from pathlib import Path

import polars as pl
from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    Failure,
    MetadataValue,
    Output,
    asset,
)

from ft_assets.partition import ERROR_CLASS_KEY, USER_ERROR, publish, tenant_job
from ftpipe.basemodel.registry import BaseModelNotFound
from ftpipe.data.normalize import normalize
from ftpipe.data.read import UnsupportedFormat, read_records
from ftpipe.data.report import validation_report_json, validation_report_markdown
from ftpipe.data.schema import validate_examples
from ftpipe.data.split import assign_split
from ftpipe.data.tokenize import tokenize_frame
from ftpipe.digests import combine, file_sha256
from ftpipe.landing import job_file_key, manifest_key
from ftpipe.manifest import ManifestError, parse_manifest
from partitions.tenant_jobs import tenant_jobs_partitions
from resources import ArtifactStoreResource, BaseModelsResource, LandingZoneResource, PlatformResource


def _user_failure(store, tenant: str, job: str, message: str) -> Failure:
    publish(store, tenant, job, "rejected.md", f"# Job {tenant}/{job} was rejected\n\n{message}\n")
    return Failure(description=message, metadata={ERROR_CLASS_KEY: USER_ERROR})


@asset(partitions_def=tenant_jobs_partitions, group_name="dataset", kinds={"polars"})
def raw_dataset(context: AssetExecutionContext, landing: LandingZoneResource,
                artifacts: ArtifactStoreResource) -> Output[dict]:
    """The tenant's manifest and data files, copied into an immutable content-addressed snapshot."""
    tenant, job = tenant_job(context)
    store = landing.store()
    key = manifest_key(tenant, job)
    try:
        manifest = parse_manifest(store.read_bytes(key), source=key)
    except ManifestError as exc:
        raise _user_failure(store, tenant, job, str(exc)) from None
    files = {"train": manifest.dataset} | ({"eval": manifest.eval_dataset} if manifest.eval_dataset else {})
    layout = artifacts.layout()
    incoming = layout.job_dir(tenant, job) / "incoming"
    incoming.mkdir(parents=True, exist_ok=True)
    # Download beside the snapshots so the final move is a rename on one filesystem.
    with tempfile.TemporaryDirectory(dir=incoming) as tmp:
        local = {}
        for role, name in files.items():
            if not store.exists(job_file_key(tenant, job, name)):
                raise _user_failure(store, tenant, job, f"{key}: field '{'dataset' if role == 'train' else 'eval_dataset'}'"
                                    f" names '{name}', which is not in the job folder")
            local[role] = Path(tmp) / name
            store.download(job_file_key(tenant, job, name), local[role])
        digest = combine(*(f"{role}:{file_sha256(p)}" for role, p in sorted(local.items())))
        snapshot = layout.snapshot_dir(tenant, job, digest)
        snapshot.mkdir(parents=True, exist_ok=True)
        for p in local.values():
            target = snapshot / p.name
            if not target.exists():
                p.replace(target)
    value = {
        "tenant": tenant, "job": job, "manifest": manifest.model_dump(), "dataset_digest": digest,
        "files": {role: str(snapshot / name) for role, name in files.items()},
    }
    return Output(value, metadata={
        "dataset_digest": digest,
        "files": MetadataValue.json(files),
        "bytes": sum((snapshot / n).stat().st_size for n in files.values()),
        "base_model": manifest.base_model,
    })


@asset(
    partitions_def=tenant_jobs_partitions, group_name="dataset", kinds={"polars", "pandera"},
    check_specs=[AssetCheckSpec("schema", asset="validated_dataset", blocking=True,
                                description="pandera model of the normalized examples; errors block training")],
)
def validated_dataset(context: AssetExecutionContext, raw_dataset: dict, landing: LandingZoneResource,
                      artifacts: ArtifactStoreResource, platform: PlatformResource):
    """Every record normalized to chat messages, split train/holdout by content hash, checked by pandera."""
    tenant, job = raw_dataset["tenant"], raw_dataset["job"]
    manifest = raw_dataset["manifest"]
    store = landing.store()
    frames = []
    try:
        for role, path in raw_dataset["files"].items():
            frame = normalize(read_records(path, display_name=Path(path).name))
            frames.append(frame.with_columns(pl.lit(role).alias("role")))
    except UnsupportedFormat as exc:
        raise _user_failure(store, tenant, job, str(exc)) from None
    examples = pl.concat(frames)
    train = assign_split(examples.filter(pl.col("role") == "train"), manifest["holdout_fraction"])
    evals = examples.filter(pl.col("role") == "eval").with_columns(pl.lit("holdout").alias("split"))
    examples = pl.concat([train, evals])

    tier = platform.config().tier_of(tenant)
    outcome = validate_examples(examples, min_examples=manifest["min_examples"], max_examples=tier.max_examples)
    stats = {
        "records": examples.height,
        "train": examples.filter(pl.col("split") == "train").height,
        "holdout": examples.filter(pl.col("split") == "holdout").height,
        "shapes": ",".join(sorted(s for s in examples["shape"].unique().to_list() if s)),
    }
    out_dir = artifacts.layout().job_dir(tenant, job) / "validated"
    out_dir.mkdir(parents=True, exist_ok=True)
    out_file = out_dir / f"{raw_dataset['dataset_digest'][:16]}.parquet"
    examples.write_parquet(out_file)

    report_md = validation_report_markdown(outcome, stats, f"{tenant}/{job}")
    publish(store, tenant, job, "validation.md", report_md)
    report_key = publish(store, tenant, job, "validation.json", validation_report_json(outcome, stats))
    for line in outcome.error_lines()[:20]:
        context.log.warning(line)

    yield Output(
        {**raw_dataset, "examples_file": str(out_file), "stats": stats},
        metadata={**stats, "errors": len(outcome.errors) + len(outcome.dataset_errors),
                  "report": MetadataValue.md(report_md), "report_key": report_key},
    )
    yield AssetCheckResult(
        check_name="schema",
        passed=outcome.passed,
        severity=AssetCheckSeverity.ERROR,
        description=None if outcome.passed else "; ".join(outcome.error_lines()[:5]),
        metadata={"errors": len(outcome.errors) + len(outcome.dataset_errors),
                  "first_errors": MetadataValue.md("\n".join(f"- {e}" for e in outcome.error_lines()[:20]) or "none")},
    )


@asset(partitions_def=tenant_jobs_partitions, group_name="dataset", kinds={"parquet"})
def tokenized_dataset(context: AssetExecutionContext, validated_dataset: dict, base_models: BaseModelsResource,
                      artifacts: ArtifactStoreResource, landing: LandingZoneResource) -> Output[dict]:
    """The train split rendered through the base model's chat template, with assistant masks; cached by content."""
    from transformers import AutoTokenizer

    tenant = validated_dataset["tenant"]
    manifest = validated_dataset["manifest"]
    try:
        base = base_models.registry().resolve(manifest["base_model"])
    except BaseModelNotFound as exc:
        raise _user_failure(landing.store(), tenant, validated_dataset["job"], f"manifest.yaml: field 'base_model': {exc}") from None
    max_len = int(manifest["hyperparameters"].get("max_seq_len", 512))
    cache_key = combine(validated_dataset["dataset_digest"], manifest["holdout_fraction"], base.tokenizer_digest,
                        base.chat_template_digest, max_len, "packing=False")
    cache_file = artifacts.layout().tokenized_cache(tenant, cache_key)
    hit = cache_file.exists()
    if not hit:
        tokenizer = AutoTokenizer.from_pretrained(base.path)
        examples = pl.read_parquet(validated_dataset["examples_file"]).filter(pl.col("split") == "train")
        table = tokenize_frame(tokenizer, examples, max_len)
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache_file.with_suffix(".tmp")
        table.write_parquet(tmp)
        tmp.replace(cache_file)
    table = pl.read_parquet(cache_file, columns=["n_tokens", "n_trainable", "truncated"])
    tokens = table["n_tokens"]
    return Output(
        {**validated_dataset, "tokenized_file": str(cache_file), "base_model": base.__dict__},
        metadata={
            "cache_hit": hit, "cache_key": cache_key[:24], "examples": table.height,
            "tokens": int(tokens.sum()), "trainable_tokens": int(table["n_trainable"].sum()),
            "tokens_p50": float(tokens.median()), "tokens_max": int(tokens.max()),
            "truncated": int(table["truncated"].sum()), "base_model": base.short(),
        },
    )
