"""``ftpipe``: submit and validate jobs, list jobs and adapters, manage adapters and tenants, run the demo."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _resources():
    from resources import resources_from_env

    return resources_from_env()


def cmd_submit(args) -> int:
    from ftpipe.submission import submit_paths

    store = _resources()["landing"].store()
    key = submit_paths(store, args.tenant, args.job, Path(args.data), Path(args.manifest) if args.manifest else None,
                       Path(args.eval_data) if args.eval_data else None)
    print(f"submitted {args.tenant}/{args.job}: {store.url.rstrip('/')}/{key}")
    return 0


def cmd_validate(args) -> int:
    from ftpipe.data.pipeline import MIN_HOLDOUT_EXAMPLES, validate_files
    from ftpipe.data.report import report_json, report_markdown
    from ftpipe.training.spec import TrainJobSpec

    res = _resources()
    config = res["platform"].config()
    pool_name = args.pool or config.default_pool
    if pool_name not in config.pools:
        raise ValueError(f"unknown pool '{pool_name}' (pools: {', '.join(sorted(config.pools))})")
    registry = res["base_models"].registry()
    # On one's own machine a model directory is fine to check against; the platform takes registered ids only.
    base = (registry.resolve_source(args.base_model, args.base_model) if Path(args.base_model).is_dir()
            else registry.resolve(args.base_model))
    files = {"train": args.file} | ({"eval": args.eval_data} if args.eval_data else {})
    mapping, objective = _mapping_and_objective(args)
    from tqdm import tqdm

    with tqdm(desc="pre-flight: render + tokenize", unit=" examples", file=sys.stderr, disable=None) as bar:
        def progress(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)

        result = validate_files(files, base.path, base.num_parameters,
                                max_len=args.max_seq_len or TrainJobSpec.max_seq_len,
                                epochs=args.epochs or TrainJobSpec.epochs, pool_name=pool_name,
                                pool=config.pools[pool_name], min_examples=args.min_examples,
                                objective=objective, progress=progress, min_holdout=MIN_HOLDOUT_EXAMPLES,
                                mapping=mapping)
    if args.json:
        print(report_json(result.check, result.preflight))
    else:
        print(report_markdown(result.check, Path(args.file).name, result.preflight))
    return 0 if result.passed else 1


def _mapping_and_objective(args):
    """The manifest's columns:/roles: and objective when one is given; the objective the file's shape implies
    when neither --objective nor the manifest sets it, said on stderr."""
    from ftpipe.data.columns import ColumnMapping
    from ftpipe.data.pipeline import inferred_objective
    from ftpipe.manifest import parse_manifest

    mapping, objective = ColumnMapping(), args.objective
    if args.manifest:
        manifest = parse_manifest(Path(args.manifest).read_bytes(), Path(args.manifest).name)
        mapping = ColumnMapping(manifest.columns, manifest.roles)
        if objective is None and "objective" in manifest.model_fields_set:
            objective = manifest.objective
    if objective is None:
        objective, shape = inferred_objective(args.file, mapping)
        where = f"the shape of its first example ('{shape}')" if shape else "no recognised example"
        print(f"objective: {objective} (inferred from {where}; --objective or the manifest's objective: sets it)",
              file=sys.stderr)
    return mapping, objective


def cmd_status(args) -> int:
    from dagster import DagsterInstance

    from ftpipe_cli.status import format_table, job_statuses

    with DagsterInstance.get() as instance:
        print(format_table(job_statuses(instance, _resources()["catalog"].adapters(), args.tenant)))
    return 0


def cmd_adapters(args) -> int:
    from ftpipe_cli.adapters import format_adapters

    print(format_adapters(_resources()["catalog"].adapters().list(args.tenant)))
    return 0


def cmd_set_status(args) -> int:
    from ftpipe.catalog.lifecycle import change_status

    res = _resources()
    record = change_status(res["catalog"].adapters(), args.adapter_id, args.status, res["base_models"].registry(),
                           res["platform"].config().serving, Path(res["artifacts"].root) / "serving")
    print(f"{record.adapter_id}: {record.status}")
    return 0


def cmd_usage(args) -> int:
    from datetime import datetime, timezone

    from ftpipe.metering.billing import monthly_bills
    from ftpipe.metering.ledger import month_of

    res = _resources()
    month = args.month or month_of(datetime.now(timezone.utc))
    bills = monthly_bills(res["catalog"].ledger().records(month=month, tenant=args.tenant),
                          res["platform"].config(), month)
    print(f"GPU usage in {month}")
    print(f"{'tenant':<16} {'tier':<10} {'attempts':>8} {'GPU-hours':>10} {'refunded':>10} "
          f"{'overage':>10} {'total':>10}")
    for b in bills:
        print(f"{b.tenant:<16} {b.tier:<10} {b.attempts:>8} {b.gpu_hours:>10.4f} {b.refunded_gpu_hours:>10.4f} "
              f"{b.overage_gpu_hours:>10.4f} {b.total:>10.2f}")
    return 0


def cmd_delete_tenant(args) -> int:
    from dagster import DagsterInstance

    from ft_assets.tenant_deletion import delete_tenant

    if not args.yes:
        print(f"ftpipe: this deletes everything of tenant {args.tenant}: uploads, reports, caches, checkpoints, "
              "adapters, registry rows, partitions and runs. Run again with --yes to do it.", file=sys.stderr)
        return 2
    res = _resources()
    with DagsterInstance.get() as instance:
        report = delete_tenant(args.tenant, instance, res["landing"].store(), res["artifacts"].layout(),
                               res["catalog"].adapters(), Path(res["artifacts"].root) / "serving")
    print(report.to_text())
    return 0


def cmd_demo(args) -> int:
    from ftpipe_cli.demo import DemoScale, run_demo
    from ftpipe_cli.status import format_table

    res = _resources()
    _ensure_tiny_model(res["base_models"].registry())
    rows = run_demo(res["landing"].store(), res["catalog"].adapters(), DemoScale(), timeout_s=args.timeout,
                    progress=lambda line: print(line, flush=True))
    print()
    print(format_table(rows))
    print("\nReports for tenants are in the landing zone under tenants/<tenant>/results/<job>/.")
    print("Open the Dagster UI on this state with:  make ui   (then http://127.0.0.1:3000)")
    return 0 if all(r.status in ("SUCCESS", "FAILURE") for r in rows) else 1


def cmd_serve_api(args) -> int:
    import uvicorn

    from ftpipe_api.app import app_from_env

    uvicorn.run(app_from_env(), host=args.host, port=args.port, log_level="info")
    return 0


def cmd_api_keys(args) -> int:
    keys = _resources()["catalog"].api_keys()
    if args.action == "create":
        record, token = keys.issue(args.tenant, args.name or "")
        print(f"API key {record.key_id} for tenant {record.tenant} (shown once; store it now):\n{token}")
    elif args.action == "revoke":
        record = keys.revoke(args.key_id)
        print(f"{record.key_id}: revoked at {record.revoked_at:%Y-%m-%d %H:%M:%S}")
    else:
        print(f"{'key id':<14} {'tenant':<20} {'name':<20} {'created (UTC)':<20} state")
        for k in keys.list(args.tenant):
            print(f"{k.key_id:<14} {k.tenant:<20} {k.name[:20]:<20} {k.created_at:%Y-%m-%d %H:%M:%S}  "
                  f"{'active' if k.active else 'revoked'}")
    return 0


def _ensure_tiny_model(registry) -> Path:
    print("preparing the base model ftpipe/tiny-llama (built once, then cached) ...", flush=True)
    from tqdm import tqdm

    # The delay keeps the bar off the screen when the model is cached: it shows only once pre-training reports.
    with tqdm(desc="  pre-training", unit="step", delay=0.5) as bar:
        def progress(step: int, total: int, loss: float) -> None:
            bar.total = total
            bar.set_postfix(loss=f"{loss:.3f}", refresh=False)
            bar.update(step - bar.n)

        path = registry.ensure_tiny_model(progress=progress)
    print(f"base model ready: {path}")
    return path


def cmd_catalog_migrate(args) -> int:
    """Run before a new version's pods start (a deployment's pre-upgrade step): processes also migrate on
    first use, but a deployment that migrates first never has two versions racing to."""
    from ftpipe.catalog.db import open_backend

    backend = open_backend(_resources()["catalog"].location)
    before, applied = backend.migrate()
    if not applied:
        print(f"catalog {backend.location}: up to date (schema version {before})")
        return 0
    print(f"catalog {backend.location}: schema version {before} -> {applied[-1].version}")
    for migration in applied:
        print(f"  {migration.version}: {migration.name}")
    return 0


def cmd_base_model(args) -> int:
    _ensure_tiny_model(_resources()["base_models"].registry())
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ftpipe", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("submit", help="upload a dataset and manifest to the landing zone (manifest last)")
    p.add_argument("--tenant", required=True)
    p.add_argument("--job", required=True)
    p.add_argument("--data", required=True, help="training data file (JSONL, CSV or Parquet)")
    p.add_argument("--eval-data", help="optional evaluation file")
    p.add_argument("--manifest", help="manifest.yaml; a default one naming --data is written if omitted")
    p.set_defaults(func=cmd_submit)
    p = sub.add_parser("validate", help="validate a dataset locally, exactly as the platform will, before uploading")
    p.add_argument("file")
    p.add_argument("--eval-data", help="optional evaluation file")
    p.add_argument("--base-model", default="ftpipe/tiny-llama")
    p.add_argument("--max-seq-len", type=int)
    p.add_argument("--epochs", type=float)
    p.add_argument("--min-examples", type=int, default=100)
    p.add_argument("--objective", choices=["sft", "dpo"],
                   help="as in the manifest (default: the manifest's, else inferred from the file's shape)")
    p.add_argument("--manifest", help="manifest.yaml whose columns:, roles: and objective apply")
    p.add_argument("--pool", help="pool for the cost estimate (default: the platform's default pool)")
    p.add_argument("--json", action="store_true", help="print the JSON report instead of markdown")
    p.set_defaults(func=cmd_validate)
    p = sub.add_parser("status", help="list jobs and their state")
    p.add_argument("--tenant")
    p.set_defaults(func=cmd_status)
    p = sub.add_parser("adapters", help="list registered adapters")
    p.add_argument("--tenant")
    p.set_defaults(func=cmd_adapters)
    for name, status, text in (("promote", "promoted", "serve an adapter (re-checks that vLLM can load it)"),
                               ("deprecate", "deprecated", "stop serving an adapter; deleted after the grace period")):
        p = sub.add_parser(name, help=text)
        p.add_argument("adapter_id")
        p.set_defaults(func=cmd_set_status, status=status)
    p = sub.add_parser("usage", help="GPU-hours, refunds, overage and cost per tenant for a month")
    p.add_argument("--month", help="YYYY-MM (default: this month, UTC)")
    p.add_argument("--tenant")
    p.set_defaults(func=cmd_usage)
    p = sub.add_parser("delete-tenant", help="delete everything of a tenant and report what was deleted")
    p.add_argument("tenant")
    p.add_argument("--yes", action="store_true", help="confirm: this cannot be undone")
    p.set_defaults(func=cmd_delete_tenant)
    p = sub.add_parser("serve-api", help="serve the OpenAI-compatible fine-tuning API")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8321)
    p.set_defaults(func=cmd_serve_api)
    p = sub.add_parser("api-keys", help="issue, list and revoke tenants' API keys")
    keys = p.add_subparsers(dest="action", required=True)
    k = keys.add_parser("create", help="issue a key for a tenant (printed once)")
    k.add_argument("--tenant", required=True)
    k.add_argument("--name", help="what the key is for, shown by list")
    k = keys.add_parser("list", help="list keys (never the keys themselves)")
    k.add_argument("--tenant")
    k = keys.add_parser("revoke", help="revoke a key at once")
    k.add_argument("key_id")
    p.set_defaults(func=cmd_api_keys)
    p = sub.add_parser("catalog", help="the platform's catalog (registry, ledger, leases, API state)")
    actions = p.add_subparsers(dest="action", required=True)
    actions.add_parser("migrate", help="bring the catalog's schema up to date (DuckDB file or PostgreSQL)")
    p.set_defaults(func=cmd_catalog_migrate)
    p = sub.add_parser("base-model", help="build the built-in tiny base model into the model cache, if not built")
    p.set_defaults(func=cmd_base_model)
    p = sub.add_parser("demo", help="seed three tenants, run their jobs through the daemon, print the outcome")
    p.add_argument("--timeout", type=float, default=900)
    p.set_defaults(func=cmd_demo)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, LookupError, OSError, RuntimeError) as exc:
        print(f"ftpipe: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
