"""The command that starts a GPU worker module: plain Python for one GPU, torchrun for a multi-GPU slot."""

from __future__ import annotations

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
