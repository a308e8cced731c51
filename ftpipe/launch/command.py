"""The command that starts a GPU worker module: plain Python for one GPU, torchrun for a multi-GPU slot."""

from __future__ import annotations

import os

WATCH_PID_ENV = "FTPIPE_WATCH_PID"
"""The process a worker must not outlive (``ftpipe.training.interrupts``), set by a local launcher: under
torchrun a worker's parent is torchrun, which does not die with the run worker that launched it."""


def worker_command(python: str, module: str, gpus: int) -> list[str]:
    """One process per GPU: DDP for adapters, FSDP for full fine-tunes (the trainer picks from the spec).

    ``--standalone`` gives a single-node rendezvous on a free local port, so that two multi-GPU jobs on one
    node never collide; torchrun forwards SIGTERM/SIGINT to every worker, which checkpoint and stop.
    """
    if gpus <= 1:
        return [python, "-m", module]
    return [python, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={gpus}", "-m", module]


THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def cpu_thread_env(slots: int, processes: int, cores: int | None = None) -> dict[str, str]:
    """The thread count for each worker process on a CPU pool: the machine's cores shared by every process of
    every slot that may run at once.

    Left alone, each process takes every core: two trainers on 2 cores ran 4 threads whose OpenMP workers
    spin-wait for each other, and each took 228 s for what one thread each did in 29 s
    (``bench/demo_margins.py``, 280 steps on the tiny model).
    """
    cores = cores or len(os.sched_getaffinity(0))
    threads = str(max(1, cores // max(1, slots * processes)))
    return {name: threads for name in THREAD_ENV}
