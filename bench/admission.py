"""Admission at scale: 1,000 manifests from 200 tenants in the landing zone, one upload-sensor tick.

Measures, in one process:
  1. the sensor tick: list the landing zone, read and route every manifest, check quotas against the
     usage ledger, return the run requests and the dynamic-partition request (goal: under 30 s);
  2. registering the partitions and creating the queued runs with their tags, as Dagster's sensor daemon
     does with the tick's result;
  3. the QueuedRunCoordinator daemon's dequeue rate with the project's limits (dagster.yaml, with
     max_concurrent_runs raised to the pools' total slots), runs finishing as they start, so that the
     rate measured is the coordinator's, not the training's. The premium and standard runs are timed
     apart: after them, the free tier's limit of one run at a time sets the pace, not the coordinator.

    .venv/bin/python -m bench.admission [--tenants 200] [--jobs-per-tenant 5]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("FTPIPE_MODEL_CACHE", str(REPO_ROOT / ".cache" / "models"))


def _platform_file(folder: Path, tenants: int) -> Path:
    import yaml

    config = yaml.safe_load((REPO_ROOT / "tenants.yaml").read_text())
    tiers = ["premium", "standard", "free"]
    config["tenants"] = {f"tenant{n:03d}": {"tier": tiers[n % 3]} for n in range(tenants)}
    # A GPU deployment: no CPU pool, so jobs are routed to the H100 pools as in production.
    config["pools"].pop("cpu-local")
    config["default_pool"] = "h100x1"
    path = folder / "tenants.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tenants", type=int, default=200)
    parser.add_argument("--jobs-per-tenant", type=int, default=5)
    args = parser.parse_args()

    import yaml
    from dagster import DagsterEvent, DagsterEventType, DagsterRunStatus, build_sensor_context, instance_for_test
    from dagster._core.test_utils import create_run_for_test, create_test_daemon_workspace_context
    from dagster._core.workspace.load_target import EmptyWorkspaceTarget
    from dagster._daemon.run_coordinator.queued_run_coordinator_daemon import QueuedRunCoordinatorDaemon

    from ftpipe.basemodel.registry import BaseModelRegistry
    from ftpipe.submission import default_manifest, submit_job
    from partitions.tenant_jobs import tenant_jobs_partitions
    from resources import BaseModelsResource, CatalogResource, LandingZoneResource, PlatformResource
    from sensors.uploads import upload_sensor
    from tests.helpers.origins import finetune_origin  # the same stand-in origin the queue tests use

    BaseModelRegistry(os.environ["FTPIPE_MODEL_CACHE"]).ensure_tiny_model()
    logging.getLogger("dagster").setLevel(logging.WARNING)  # the daemon logs every iteration
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        platform_file = _platform_file(tmp, args.tenants)
        landing = LandingZoneResource(url=str(tmp / "landing"))
        store = landing.store()
        n_manifests = args.tenants * args.jobs_per_tenant
        for n in range(n_manifests):
            submit_job(store, f"tenant{n % args.tenants:03d}", f"job{n // args.tenants}",
                       {"train.jsonl": b'{"prompt": "q", "completion": "a"}\n'}, default_manifest("train.jsonl"))
        resources = {"landing": landing, "platform": PlatformResource(tenants_file=str(platform_file)),
                     "base_models": BaseModelsResource(cache_dir=os.environ["FTPIPE_MODEL_CACHE"]),
                     "catalog": CatalogResource(location=str(tmp / "catalog.duckdb"))}
        coordinator = yaml.safe_load((REPO_ROOT / "dagster.yaml").read_text())["run_coordinator"]
        slots = sum(p["slots"] for p in yaml.safe_load(platform_file.read_text())["pools"].values())
        coordinator["config"]["max_concurrent_runs"] = slots
        with instance_for_test(overrides={
            "run_coordinator": coordinator,
            "run_launcher": {"module": "dagster._core.test_utils", "class": "MockedRunLauncher"},
        }) as instance:
            start = time.perf_counter()
            result = upload_sensor(build_sensor_context(instance=instance, resources=resources))
            tick_s = time.perf_counter() - start
            assert len(result.run_requests) == n_manifests, len(result.run_requests)

            start = time.perf_counter()
            instance.add_dynamic_partitions(tenant_jobs_partitions.name,
                                            result.dynamic_partitions_requests[0].partition_keys)
            origin = finetune_origin()
            for request in result.run_requests:
                create_run_for_test(instance, job_name="finetune", status=DagsterRunStatus.QUEUED,
                                    remote_job_origin=origin, tags={**request.tags,
                                                                    "dagster/partition": request.partition_key})
            queue_s = time.perf_counter() - start

            daemon = QueuedRunCoordinatorDaemon(interval_seconds=1)
            dequeued, progress, start = 0, [], time.perf_counter()
            with create_test_daemon_workspace_context(EmptyWorkspaceTarget(), instance) as workspace:
                while dequeued < n_manifests:
                    list(daemon.run_iteration(workspace))
                    started = instance.get_runs(filters=None)
                    running = [r for r in started if r.status == DagsterRunStatus.STARTING]
                    dequeued = sum(r.status != DagsterRunStatus.QUEUED for r in started)
                    progress.append((time.perf_counter() - start, dequeued))
                    for run in running:
                        instance.report_dagster_event(DagsterEvent(
                            event_type_value=DagsterEventType.RUN_SUCCESS.value, job_name=run.job_name),
                            run_id=run.run_id)
            dequeue_s = time.perf_counter() - start

    # Premium and standard runs dequeue first, 16 at a time (h100x1's slots); the free tier's runs then go
    # one at a time, by its limit, however fast the coordinator is.
    paid = n_manifests - sum(1 for r in result.run_requests if r.tags["ftpipe/tier"] == "free")
    paid_s = next(t for t, n in progress if n >= paid)
    figures = {
        "manifests": n_manifests, "tenants": args.tenants,
        "sensor_tick_s": round(tick_s, 2),
        "register_partitions_and_queue_runs_s": round(queue_s, 2),
        "dequeue_iterations": len(progress),
        "dequeue_paid_tiers_runs": paid,
        "dequeue_paid_tiers_s": round(paid_s, 1),
        "dequeue_paid_tiers_runs_per_s": round(paid / paid_s, 1),
        "dequeue_all_s_incl_free_tier_one_at_a_time": round(dequeue_s, 1),
        "pools": dict(Counter(r.tags["ftpipe/pool"] for r in result.run_requests)),
    }
    print(json.dumps(figures, indent=2))
    out = REPO_ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / "queue.json").write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
