"""How far the demo tenants' adapters are from the platform's quality gates, and how much that moves by CPU.

For each demo tenant this runs the code path the pipeline runs, without Dagster: the upload the demo submits
(``ftpipe_cli.demo.demo_uploads``), its validation (``validate_to_parquet``: errors, duplicate and
near-duplicate warnings), tokenization through the base model's chat template, the training plan (``plan_training``:
the demo manifest's choices, the platform's for the rest, on its default pool), ``run_training``, and
``compare_base_and_tuned`` on the held-out split and the golden set. It prints and writes, per tenant:
held-out and golden exact match of base and tuned, golden perplexity, training seconds, and each of the
platform's gates (``tenants.yaml``) with its value, 95% interval, verdict, and the distance from the interval end
that decides it to the threshold.

``--matrix`` runs the same thing once per float-kernel setting (``ATEN_CPU_CAPABILITY=default`` and ``avx2``)
and torch thread count (1 and 2), each in its own process, and reports the spread of every number across
them beside the margins: a margin must be far larger than the spread for the demo to pass on any CPU.
With ``--own-base`` each setting also builds its own base model, as another CPU would.

    .venv/bin/python -m bench.demo_margins                      # this process's kernels and threads
    .venv/bin/python -m bench.demo_margins --matrix --out m.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]

for _var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("FTPIPE_MODEL_CACHE", str(REPO_ROOT / ".cache" / "models"))

MATRIX = [
    # (label, environment, torch threads): ATEN_CPU_CAPABILITY picks ATen's vectorised kernels, the thread count
    # how reductions are split, MKL_CBWR=COMPATIBLE a generic code path for MKL's matrix products (as another
    # CPU model would take its own). Each runs in its own process: the variables are read at start-up.
    ("default kernels, 1 thread", {"ATEN_CPU_CAPABILITY": "default"}, 1),
    ("default kernels, 2 threads", {"ATEN_CPU_CAPABILITY": "default"}, 2),
    ("avx2 kernels, 1 thread", {"ATEN_CPU_CAPABILITY": "avx2"}, 1),
    ("avx2 kernels, 2 threads", {"ATEN_CPU_CAPABILITY": "avx2"}, 2),
    ("avx2 kernels, MKL compatible mode, 2 threads", {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE"}, 2),
]
AVX512 = ("avx512 kernels, 2 threads", {"ATEN_CPU_CAPABILITY": "avx512"}, 2)
"""Added where the CPU has it."""


def _number(x) -> float:
    """A row's value: a float, or an estimate with an interval (its ``value``)."""
    return float(getattr(x, "value", x))


def _metric_name(row) -> str:
    """``holdout_exact_match``, ``golden_perplexity``, ...: the gate metric's name, whichever way the row splits it."""
    return row.task if row.task.endswith(row.metric) else f"{row.task}_{row.metric}"


def _margin(value: float, op: str, threshold: float) -> float:
    """How far ``value`` is inside its gate (negative: the gate fails)."""
    return value - threshold if op in (">", ">=") else threshold - value


def run_tenant(upload, base, config, pool_name: str, work: Path, evaluate: bool = True,
               seed: int | None = None, hyperparameters: dict | None = None) -> dict:
    import polars as pl
    import yaml
    from transformers import AutoTokenizer

    from ftpipe.data.pipeline import MIN_HOLDOUT_EXAMPLES, PREFLIGHT_COLUMNS, tokenize_to_parquet, validate_to_parquet
    from ftpipe.evaluation.compare import compare_base_and_tuned
    from ftpipe.manifest import parse_manifest
    from ftpipe.training.plan import plan_training
    from ftpipe.training.runner import run_training
    from ftpipe.training.spec import TrainJobSpec

    if hyperparameters:  # a tenant's own choices, on top of the demo's
        upload.manifest["hyperparameters"] = {**upload.manifest.get("hyperparameters", {}), **hyperparameters}
    if seed is not None:  # a seed of the tenant's: the spread between seeds is a yardstick for the kernels' spread
        upload.manifest["hyperparameters"] = {**upload.manifest.get("hyperparameters", {}), "seed": seed}
    manifest = parse_manifest(yaml.safe_dump(upload.manifest).encode()).model_dump()
    work.mkdir(parents=True, exist_ok=True)
    files = {"train": work / manifest["dataset"]}
    for name, data in upload.files.items():
        (work / name).write_bytes(data)
    out: dict = {"tenant": upload.tenant, "manifest_hyperparameters": manifest["hyperparameters"]}

    check = validate_to_parquet({k: str(v) for k, v in files.items()}, manifest["holdout_fraction"],
                                work / "examples.parquet", manifest["min_examples"],
                                config.tier_of(upload.tenant).max_examples, manifest["objective"],
                                min_holdout=MIN_HOLDOUT_EXAMPLES)
    examples = pl.read_parquet(work / "examples.parquet")
    valid = examples.filter(pl.col("problem").is_null())
    out["validation"] = {
        **check.stats, "errors": check.outcome.n_errors, "passed": check.outcome.passed,
        "warnings": {w.kind: w.count for w in check.warnings},
        "distinct_examples": valid["messages"].n_unique(),
        "distinct_prompts_train": valid.filter(pl.col("split") == "train")["messages"].n_unique(),
    }
    if not check.outcome.passed or not evaluate:
        out["error_lines"] = check.outcome.error_lines()[:10]
        return out

    max_len = int(manifest["hyperparameters"].get("max_seq_len", TrainJobSpec.max_seq_len))
    tokenizer = AutoTokenizer.from_pretrained(base.path)
    tokenized, tokenized_holdout = work / "tokenized.parquet", work / "tokenized_holdout.parquet"
    # As the tokenized_dataset asset: the held-out split beside the train split, for the validation loss.
    tokenize_to_parquet(tokenizer, work / "examples.parquet", tokenized, max_len, manifest["objective"],
                        eval_file=tokenized_holdout)
    stats = pl.read_parquet(tokenized, columns=PREFLIGHT_COLUMNS)
    pool = config.pools[pool_name]
    plan = plan_training(base.path, base.num_parameters, manifest["method"], manifest["objective"],
                         manifest["hyperparameters"], str(tokenized), stats.height, int(stats["n_tokens"].max()), pool,
                         eval_file=str(tokenized_holdout))
    spec = plan.spec
    spec.output_dir = str(work / "training")
    out["plan"] = {row["name"]: f"{row['shown']} ({row['source']})" for row in plan.rows
                   if row["name"] in ("learning_rate", "epochs", "micro_batch_size", "gradient_accumulation_steps",
                                      "lora_r", "lora_alpha", "eval_steps", "checkpoint_selection")}
    start = time.perf_counter()
    result = run_training(spec)
    out["training"] = {"seconds": round(time.perf_counter() - start, 2), "steps": result.steps,
                       "final_loss": round(result.final_loss, 4), "train_loss": round(result.train_loss, 4),
                       "examples": stats.height}
    for name in ("selected_step", "best_step", "best_eval_loss"):  # which weights the adapter holds
        if getattr(result, name, None) is not None:
            out["training"][name] = getattr(result, name)

    holdout = examples.filter(pl.col("split") == "holdout")
    conversations = [json.loads(m) for m in holdout["messages"]]
    start = time.perf_counter()
    report = compare_base_and_tuned(base.path, result.adapter_dir, conversations, work / "eval",
                                    golden_set=config.evaluation.golden_set)
    out["eval_seconds"] = round(time.perf_counter() - start, 2)
    out["n_holdout"], out["n_golden"] = report.n_holdout, report.n_golden
    # Only the fields every version of the report has: the rows with base, tuned and delta.
    out["metrics"] = {_metric_name(r): {side: round(_number(getattr(r, side)), 4)
                                        for side in ("base", "tuned", "delta")}
                      for r in report.rows}
    out["platform_gates"] = _platform_gates(report, config)
    return out


def _platform_gates(report, config) -> dict:
    """The platform's own verdicts (``ftpipe.evaluation.gates``): each gate's value, interval, verdict, and how
    far the interval end that decides it is from the threshold (negative: the gate fails)."""
    from ftpipe.evaluation.gates import evaluate_gates, gate_metrics, parse_gates

    results = evaluate_gates(parse_gates(config.evaluation.quality_gates, "platform", "sft"),
                             gate_metrics(report.to_dict()))
    out = {}
    for r in results:
        e, gate = r.estimate, r.gate
        upward = gate.op in (">", ">=")
        # A gate that needs proof passes when its worst end meets it; a harm gate fails when its best end misses.
        end = (e.low if upward else e.high) if gate.needs_proof else (e.high if upward else e.low)
        out[gate.metric] = {"value": round(e.value, 4), "interval": [round(e.low, 4), round(e.high, 4)],
                            "condition": f"{gate.op} {gate.threshold:g}", "verdict": r.verdict, "passed": r.passed,
                            "deciding_end_margin": round(_margin(end, gate.op, gate.threshold), 4)}
    return out


def run_once(args) -> dict:
    import torch

    from ftpipe.basemodel.registry import BaseModelRegistry
    from ftpipe.basemodel.tiny import TINY_MODEL_ID, TinyModelRecipe
    from ftpipe.tenants import load_platform_config
    from ftpipe_cli.demo import DemoScale, demo_uploads

    if args.threads:
        torch.set_num_threads(args.threads)
    recipe = TinyModelRecipe(**json.loads(args.recipe)) if args.recipe else TinyModelRecipe()
    registry = BaseModelRegistry(os.environ["FTPIPE_MODEL_CACHE"], tiny_recipe=recipe)
    start = time.perf_counter()
    built = not (registry.tiny_model_dir() / "config.json").exists()
    base = registry.resolve(TINY_MODEL_ID)
    build_seconds = round(time.perf_counter() - start, 1) if built else None
    config = load_platform_config(args.tenants_file)
    scale = DemoScale(**{**({"rows": args.rows} if args.rows else {}),
                         **({"epochs": args.epochs} if args.epochs else {})})
    wanted = args.tenant.split(",") if args.tenant else None
    out = {"setting": {"aten_cpu_capability": torch.backends.cpu.get_cpu_capability(),
                       "ATEN_CPU_CAPABILITY": os.environ.get("ATEN_CPU_CAPABILITY", ""),
                       "MKL_CBWR": os.environ.get("MKL_CBWR", ""), "seed": args.seed,
                       "threads": torch.get_num_threads(), "torch": torch.__version__},
           "scale": {"rows": scale.rows, "epochs": scale.epochs, "holdout_fraction": scale.holdout_fraction},
           "base_model": base.short(),
           "base_model_build_seconds": build_seconds, "tenants": {}}
    with tempfile.TemporaryDirectory(prefix="demo-margins-") as tmp:
        tmp = args.keep or tmp
        for upload in demo_uploads(scale):
            if wanted and upload.tenant not in wanted:
                continue
            print(f"[{out['setting']['aten_cpu_capability']}, {out['setting']['threads']} thread(s)] "
                  f"{upload.tenant} ...", file=sys.stderr, flush=True)
            out["tenants"][upload.tenant] = run_tenant(upload, base, config, config.default_pool,
                                                       Path(tmp) / upload.tenant, seed=args.seed,
                                                       hyperparameters=json.loads(args.hp) if args.hp else None)
    return out


def _row(tenant: dict) -> list[str]:
    if "metrics" not in tenant:
        v = tenant["validation"]
        return [f"validation: {v['errors']} error(s), warnings {v['warnings'] or 'none'}"]
    m = tenant["metrics"]
    return [f"held-out EM {m['holdout_exact_match']['base']:.3f} -> {m['holdout_exact_match']['tuned']:.3f} "
            f"(n={tenant['n_holdout']})",
            f"golden EM {m['golden_exact_match']['base']:.3f} -> {m['golden_exact_match']['tuned']:.3f}",
            f"golden ppl {m['golden_perplexity']['base']:.3f} -> {m['golden_perplexity']['tuned']:.3f}",
            f"train {tenant['training']['seconds']:.0f}s/{tenant['training']['steps']} steps"
            + (f", adapter = step {tenant['training']['selected_step']}"
               if "selected_step" in tenant["training"] else ""),
            *(f"platform gate {k} {v['condition']}: {v['value']:.3f} [{v['interval'][0]:.3f}, {v['interval'][1]:.3f}] "
              f"{v['verdict']}, {'passes' if v['passed'] else 'FAILS'} (deciding end {v['deciding_end_margin']:+.3f} "
              f"from the threshold)" for k, v in tenant["platform_gates"].items())]


def print_run(run: dict) -> None:
    s = run["setting"]
    print(f"== {s.get('label') or s['aten_cpu_capability'] + ' kernels'} ({s['aten_cpu_capability']}, {s['threads']} "
          f"thread(s){', MKL_CBWR=' + s['MKL_CBWR'] if s.get('MKL_CBWR') else ''}), base {run['base_model']}, "
          f"epochs {run['scale']['epochs'] or 'automatic'}")
    for name, tenant in run["tenants"].items():
        v = tenant["validation"]
        print(f"  {name}: {v['records']} records ({v['train']} train, {v['holdout']} held out), "
              f"{v['distinct_examples']} distinct, warnings {v['warnings'] or 'none'}")
        for part in _row(tenant):
            print(f"      {part}")


def spread(runs: list[dict]) -> dict:
    """Per tenant and number: min, max and max - min across the runs, beside the smallest gate margin."""
    out = {}
    for name in runs[0]["tenants"]:
        tenants = [r["tenants"][name] for r in runs]
        if "metrics" not in tenants[0]:
            continue
        numbers = {}
        for key in tenants[0]["metrics"]:
            for side in ("base", "tuned"):
                numbers[f"{key}_{side}"] = [t["metrics"][key][side] for t in tenants]
        for key in tenants[0]["platform_gates"]:
            numbers[f"gate_{key}"] = [t["platform_gates"][key]["value"] for t in tenants]
            numbers[f"margin_{key}"] = [t["platform_gates"][key]["deciding_end_margin"] for t in tenants]
        numbers["training_seconds"] = [t["training"]["seconds"] for t in tenants]
        out[name] = {k: {"min": min(v), "max": max(v), "spread": round(max(v) - min(v), 4)} for k, v in numbers.items()}
    return out


def _settings() -> list[tuple[str, dict, int]]:
    import torch

    return MATRIX + ([AVX512] if "AVX512" in torch.backends.cpu.get_cpu_capability() else [])


def _slug(label: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in label).strip("-")


def run_matrix(args) -> dict:
    """Every setting in its own process, then the spread. ``--own-base``: each setting also builds its own base
    model (as another machine would: its own cached build), in a cache folder of its own; ``--seeds``: the
    first setting again with other training seeds, a yardstick for larger perturbations than these."""
    runs = []
    jobs = [(label, env, threads, None) for label, env, threads in _settings()]
    jobs += [(f"{jobs[0][0]}, seed {seed}", jobs[0][1], jobs[0][2], seed)
             for seed in (int(x) for x in args.seeds.split(",") if x)] if args.seeds else []
    for label, extra, threads, seed in jobs:
        env = {**os.environ, **extra, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
        if args.own_base:
            env["FTPIPE_MODEL_CACHE"] = str(Path(os.environ["FTPIPE_MODEL_CACHE"]) / "matrix" / _slug(label))
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
            child_out = f.name
        cmd = [sys.executable, "-m", "bench.demo_margins", "--threads", str(threads), "--out", child_out,
               "--tenants-file", str(Path(args.tenants_file).resolve()), "--quiet"]
        for flag in ("rows", "epochs", "tenant", "recipe", "hp"):
            if getattr(args, flag):
                cmd += [f"--{flag}", str(getattr(args, flag))]
        if seed is not None:
            cmd += ["--seed", str(seed)]
        subprocess.run(cmd, env=env, cwd=REPO_ROOT, check=True)
        run = json.loads(Path(child_out).read_text())
        os.unlink(child_out)
        run["setting"]["label"] = label
        runs.append(run)
        print_run(run)
    result = {"runs": runs, "spread": spread([r for r in runs if ", seed " not in r["setting"]["label"]])}
    if args.seeds:
        result["spread_with_seeds"] = spread(runs)
    for key, title in (("spread", "the kernel and thread settings"), ("spread_with_seeds", "those and the seeds")):
        if key not in result:
            continue
        print(f"== spread across {title} (max - min), and the smallest margin to each platform gate")
        for name, numbers in result[key].items():
            shown = {k: v for k, v in numbers.items() if k.startswith(("holdout_exact", "golden_exact", "golden_perp",
                                                                         "gate_"))}
            print(f"  {name}: " + ", ".join(f"{k} {v['spread']:.3f}" for k, v in shown.items()))
            for k, v in numbers.items():
                if k.startswith("margin_"):
                    print(f"      smallest {k}: {v['min']:+.3f} (spread of the gate value "
                          f"{numbers['gate_' + k[7:]]['spread']:.3f})")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, help="override the demo's rows per tenant")
    parser.add_argument("--epochs", type=float, help="set the epochs in every manifest (default: the demo's)")
    parser.add_argument("--tenant", help="comma-separated tenants (default: every demo tenant)")
    parser.add_argument("--seed", type=int, help="train with this seed instead of the platform's (a tenant override)")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    parser.add_argument("--matrix", action="store_true", help="every kernel and thread setting, each in a process")
    parser.add_argument("--own-base", action="store_true",
                        help="with --matrix: each setting builds its own base model, as another machine would")
    parser.add_argument("--seeds", help="with --matrix: also train the first setting with these seeds (1,2,3)")
    parser.add_argument("--hp", help="JSON hyperparameters set in every manifest, e.g. '{\"learning_rate\": 1e-3}'")
    parser.add_argument("--recipe", help="JSON overrides of TinyModelRecipe, for experiments")
    parser.add_argument("--tenants-file", default=os.environ.get("FTPIPE_TENANTS", str(REPO_ROOT / "tenants.yaml")))
    parser.add_argument("--out", help="write the results as JSON here")
    parser.add_argument("--keep", help="keep each tenant's data, adapter and evaluation under this folder")
    parser.add_argument("--quiet", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    result = run_matrix(args) if args.matrix else run_once(args)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))
    if not args.matrix and not args.quiet:
        print_run(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
