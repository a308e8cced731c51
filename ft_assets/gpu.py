"""GPU work of a run, pinned to devices it leases from its pool (``ftpipe.leases``)."""

import os

from dagster import AssetExecutionContext, DagsterInstance, PipesClientCompletedInvocation

from ftpipe.launch.command import WATCH_PID_ENV
from ftpipe.leases import Lease, process_is_gone
from ftpipe.tenants import PoolConfig
from resources import CatalogResource, TrainerLauncherResource


def holder_is_dead(instance: DagsterInstance, lease: Lease) -> bool:
    """A lease is dead when its run has ended (it could not release, e.g. its worker was killed) or its
    worker process is gone from this host."""
    run = instance.get_run_by_id(lease.run_id)
    return run is None or run.is_finished or process_is_gone(lease)


def run_on_pool(context: AssetExecutionContext, trainer: TrainerLauncherResource, catalog: CatalogResource,
                pool_name: str, pool: PoolConfig, module: str, extras: dict,
                labels: dict[str, str] | None = None, processes: int | None = None) -> PipesClientCompletedInvocation:
    """Run ``module`` through Pipes on the slot's devices: a lease on all of them for as long as it runs,
    whatever number of ``processes`` use them (default: one per GPU)."""
    if trainer.backend == "kubernetes":  # the kubelet assigns a pod its GPUs
        return trainer.run(context, module, extras, pool=pool, labels=labels, processes=processes)
    # The worker stops when this process dies, even under torchrun, whose workers are its grandchildren.
    trainer = trainer.model_copy(update={"env": {**trainer.env, WATCH_PID_ENV: str(os.getpid())}})
    leases = catalog.leases()
    with leases.hold(pool_name, pool.slots * pool.gpus_per_slot, pool.gpus_per_slot, context.run.run_id,
                     lambda lease: holder_is_dead(context.instance, lease)) as devices:
        visible = ",".join(str(d) for d in devices)
        context.log.info(f"leased device(s) {visible} of pool {pool_name}")
        return trainer.run(context, module, extras, pool=pool, devices=visible, labels=labels, processes=processes)
