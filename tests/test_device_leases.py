"""Device leases: disjoint under concurrent claims, released with their run, reclaimed from the dead."""

import multiprocessing
import os

import pytest
from dagster import (
    AssetExecutionContext,
    DagsterRunStatus,
    MaterializeResult,
    asset,
    instance_for_test,
    materialize,
)
from dagster._core.test_utils import create_run_for_test

from ft_assets.gpu import run_on_pool
from ftpipe.leases import DeviceLeases, NoFreeDevices
from resources import CatalogResource, PlatformResource, TrainerLauncherResource
from tests.helpers.lease_claim import claim


def test_claims_are_disjoint_and_a_run_gets_its_own_devices_back(catalog_at):
    leases = DeviceLeases(catalog_at)
    assert leases.acquire("h100x4", 8, 4, "run-a") == [0, 1, 2, 3]
    assert leases.acquire("h100x4", 8, 4, "run-b") == [4, 5, 6, 7]
    assert leases.acquire("h100x4", 8, 4, "run-a") == [0, 1, 2, 3]  # a retried step of the same run
    with pytest.raises(NoFreeDevices, match="pool h100x4: run run-c needs 4 device\\(s\\), 0 of 8 are free"):
        leases.acquire("h100x4", 8, 4, "run-c")
    assert leases.acquire("h100x1", 16, 1, "run-c") == [0]  # pools are separate
    leases.release("run-a")
    assert leases.acquire("h100x4", 8, 4, "run-c") == [0, 1, 2, 3]


def test_concurrent_claims_from_separate_processes_never_share_a_device(catalog_at):
    db = catalog_at
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    workers = [context.Process(target=claim, args=(db, f"run-{n}", queue)) for n in range(10)]
    for w in workers:
        w.start()
    results = dict(queue.get(timeout=360) for _ in workers)
    for w in workers:
        w.join(timeout=60)
    granted = [devices for devices in results.values() if isinstance(devices, list)]
    refused = [message for message in results.values() if isinstance(message, str)]
    assert sorted(d for devices in granted for d in devices) == list(range(8)), results
    assert len(refused) == 2 and all("0 of 8 are free" in m for m in refused), results


def test_a_lease_whose_worker_died_is_reclaimed(catalog_at):
    db = catalog_at
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    # A worker claims the pool's only device and dies without releasing it.
    worker = context.Process(target=claim, args=(db, "dead-run", queue))
    worker.start()
    assert queue.get(timeout=120) == ("dead-run", [0])
    worker.join(timeout=60)
    leases = DeviceLeases(db)
    (lease,) = leases.held()
    assert lease.pid == worker.pid and lease.run_id == "dead-run"
    # The next claim finds the holder gone (by the default liveness check: the process) and takes the device.
    assert leases.acquire("h100x1", 1, 1, "next-run") == [0]
    assert [(lease.run_id, lease.pid) for lease in leases.held()] == [("next-run", os.getpid())]


def test_a_runs_gpu_process_is_pinned_to_its_leased_devices_and_the_lease_ends_with_it(tmp_path):
    platform_file = tmp_path / "tenants.yaml"
    platform_file.write_text(
        "default_pool: quad\npools:\n  quad: {gpu: cpu, gpu_memory_gb: 8, gpus_per_slot: 2, slots: 2, "
        "peak_tflops: 1}\ntiers:\n  premium: {priority: 10}\n")
    catalog = CatalogResource(location=str(tmp_path / "catalog.duckdb"))
    seen = {}

    @asset
    def gpu_work(context: AssetExecutionContext, trainer: TrainerLauncherResource, catalog: CatalogResource,
                 platform: PlatformResource) -> MaterializeResult:
        pool = platform.config().pools["quad"]
        invocation = run_on_pool(context, trainer, catalog, "quad", pool, "tests.helpers.report_devices",
                                 extras={"hold_s": 0.1}, processes=1)
        seen[context.run.run_id] = invocation.get_custom_messages()[0]
        return MaterializeResult()

    resources = {"trainer": TrainerLauncherResource(), "catalog": catalog,
                 "platform": PlatformResource(tenants_file=str(platform_file))}
    leases = catalog.leases()
    with instance_for_test() as instance:
        # Devices 0 and 1 are held by a run that is still going; 2 and 3 by one that ended without releasing
        # them (its worker was killed).
        live = create_run_for_test(instance, status=DagsterRunStatus.STARTED)
        leases.acquire("quad", 4, 2, live.run_id)
        ended = create_run_for_test(instance, status=DagsterRunStatus.FAILURE)
        leases.acquire("quad", 4, 2, ended.run_id)
        result = materialize([gpu_work], resources=resources, instance=instance)
    assert result.success
    assert seen[result.run_id]["visible"] == "2,3"  # the dead run's devices, never the live one's
    # A CPU pool's 2 slots share the machine's cores: the process got its share of threads, not all of them.
    assert seen[result.run_id]["threads"] == str(max(1, len(os.sched_getaffinity(0)) // 2))
    # The run's lease ended with its GPU process; the live run keeps its devices.
    assert [(lease.run_id, lease.device) for lease in leases.held()] == [(live.run_id, 0), (live.run_id, 1)]


def test_a_cpu_pools_processes_share_the_cores_between_them():
    from ftpipe.launch.command import cpu_thread_env

    assert cpu_thread_env(slots=2, processes=1, cores=16) == {"OMP_NUM_THREADS": "8", "MKL_NUM_THREADS": "8"}
    assert cpu_thread_env(slots=2, processes=2, cores=16)["OMP_NUM_THREADS"] == "4"
    assert cpu_thread_env(slots=4, processes=1, cores=2)["OMP_NUM_THREADS"] == "1"  # never none
