"""GPU-idle seconds per job: how long a job holds a GPU slot while its GPUs have nothing to do.

A slot is held by the run that carries the pool's tag, from its start to its end; GPUs work from the training
step's start to the evaluation step's end (``adapter`` and ``eval_report``). The rest of the held time is
idle: validation, tokenization and the pre-flight before, registration and the reports after.

Two ways to run the same job, in the same process on the same data, read from Dagster's event log:

- one run of every asset (the obvious design: the run's pool tag holds the slot for the whole run);
- the platform's two stages: ``prepare`` (CPU, no slot), then ``finetune``, the only run holding the slot.

Runs execute in process (``execute_in_process``): a launched run also holds its slot while its worker starts,
the same for both. Each variant is its own tenant, so neither reuses the other's tokenized cache or training.

    make base-model
    .venv/bin/python -m bench.gpu_idle [--rows 20000] [--max-steps 40]

Figures go to bench/results/gpu_idle.json.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("FTPIPE_MODEL_CACHE", str(REPO_ROOT / ".cache" / "models"))
for _var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ[_var] = "1"

GPU_STEPS = ("adapter", "eval_report")


def held_and_busy(instance, run_ids: list[str], slot_run: str) -> dict:
    """Seconds the slot-holding run held its slot, and seconds its GPU steps ran, from the event log."""
    from dagster import DagsterEventType

    record = instance.get_run_record_by_id(slot_run)
    held = record.end_time - record.start_time
    starts, ends = {}, {}
    for run_id in run_ids:
        for entry in instance.all_logs(run_id, of_type={DagsterEventType.STEP_START, DagsterEventType.STEP_SUCCESS}):
            if entry.step_key in GPU_STEPS:
                (starts if entry.dagster_event.event_type == DagsterEventType.STEP_START else ends)[
                    entry.step_key] = entry.timestamp
    busy = ends["eval_report"] - starts["adapter"]
    records = [instance.get_run_record_by_id(run_id) for run_id in run_ids]
    total = max(r.end_time for r in records) - min(r.start_time for r in records)
    return {"held_s": round(held, 2), "gpu_busy_s": round(busy, 2), "gpu_idle_s": round(held - busy, 2),
            "idle_share": round((held - busy) / held, 3), "job_wall_s": round(total, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000, help="examples in the tenant's upload")
    parser.add_argument("--max-steps", type=int, default=40, help="training steps (the GPU work's length)")
    args = parser.parse_args()

    from dagster import AssetSelection, Definitions, define_asset_job, in_process_executor, instance_for_test

    from bench.validate import write_rows
    from ft_assets.definitions import ASSETS, build_defs
    from ftpipe.submission import default_manifest, submit_job
    from tests.helpers.resources import local_resources_at
    from tests.helpers.stages import execute_stages

    with tempfile.TemporaryDirectory() as tmp, instance_for_test() as instance:
        folder = Path(tmp)
        tenants = folder / "tenants.yaml"
        tenants.write_text(
            "default_pool: cpu-local\n"
            "pools:\n  cpu-local: {gpu: cpu, gpu_memory_gb: 8, peak_tflops: 0.046, mfu: 1.0, price_per_gpu_hour: 1.0}\n"
            "tiers:\n  premium: {priority: 10}\n"
            "tenants:\n  one-run: {tier: premium}\n  two-stages: {tier: premium}\n"
            "evaluation: {quality_gates: {}}\n")
        os.environ["FTPIPE_TENANTS"] = str(tenants)  # the jobs' partition tags read it
        resources = local_resources_at(folder, tenants)
        upload = folder / "train.jsonl"
        write_rows(upload, args.rows)  # support tickets, all distinct (bench/validate.py's)
        data = upload.read_bytes()
        manifest = default_manifest("train.jsonl", holdout_fraction=min(0.2, 100 / args.rows),
                                    hyperparameters={"max_steps": args.max_steps})
        store = resources["landing"].store()
        for tenant in ("one-run", "two-stages"):
            submit_job(store, tenant, "job", {"train.jsonl": data}, manifest)
        instance.add_dynamic_partitions("tenant_jobs", ["one-run__job", "two-stages__job"])
        # The alternative: every asset in one run, which holds the pool's slot from start to end.
        whole = define_asset_job("whole", selection=AssetSelection.groups("dataset", "training", "evaluation",
                                                                          "registry"),
                                 executor_def=in_process_executor)
        defs = build_defs(resources)
        results = {}
        started = time.perf_counter()
        single = Definitions(
            assets=ASSETS, jobs=[whole], resources=resources,
        ).resolve_job_def("whole").execute_in_process(
            instance=instance, partition_key="one-run__job", tags={"ftpipe/pool": "cpu-local"})
        assert single.success
        results["one run"] = held_and_busy(instance, [single.run_id], single.run_id)
        staged = execute_stages(defs, instance, "two-stages__job")
        assert staged.success
        results["two stages"] = held_and_busy(instance, [r.run_id for r in staged.results], staged.run_id)
        wall = time.perf_counter() - started

    saved = results["one run"]["gpu_idle_s"] - results["two stages"]["gpu_idle_s"]
    print(f"{args.rows:,} examples, {args.max_steps} training steps; {wall:.0f} s in all")
    print(f"{'':12} {'slot held':>10} {'GPU busy':>9} {'GPU idle':>9} {'idle share':>11}")
    for name, r in results.items():
        print(f"{name:12} {r['held_s']:9.1f}s {r['gpu_busy_s']:8.1f}s {r['gpu_idle_s']:8.1f}s {r['idle_share']:10.0%}")
    print(f"GPU-idle seconds saved per job: {saved:.1f}")
    out = REPO_ROOT / "bench" / "results" / "gpu_idle.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"rows": args.rows, "max_steps": args.max_steps, "results": results,
                               "idle_saved_s": round(saved, 2)}, indent=2))


if __name__ == "__main__":
    main()
