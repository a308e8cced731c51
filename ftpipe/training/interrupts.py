"""Requests to stop training early: preemption and spot signals, and the death of the run worker.

Dagster forwards a run's termination to a Pipes subprocess as SIGINT; Kubernetes and spot reclaim send
SIGTERM; SIGUSR1 is the platform's "checkpoint and yield" request. All three set one flag that the training
loop reads at the next step boundary, where it saves a checkpoint and stops cleanly, so the work lost is one
step, not a checkpoint interval.

A trainer must never outlive its run worker and keep holding a GPU, but a SIGKILLed run worker sends no
signal. A watchdog thread notices that the run worker has gone and raises the same flag. The launcher names
the run worker in ``FTPIPE_WATCH_PID``: under torchrun the trainer's parent is torchrun, which lives on when
the run worker is killed. Without it the watchdog watches the parent.
"""

from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager

import psutil

from ftpipe.launch.command import WATCH_PID_ENV

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)


class StopRequest:
    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason: str | None = None
        self.watching: int | None = None
        """The process whose death stops training: the run worker, or the parent."""

    def request(self, reason: str) -> None:
        if not self._event.is_set():
            self.reason = reason
            self._event.set()

    @property
    def requested(self) -> bool:
        return self._event.is_set()


@contextmanager
def stop_after(stop: StopRequest, seconds: float, reason: str):
    """Request ``stop`` once ``seconds`` have passed (0: never), for the duration of the block."""
    if seconds <= 0:
        yield stop
        return
    timer = threading.Timer(seconds, stop.request, args=(reason,))
    timer.daemon = True
    timer.start()
    try:
        yield stop
    finally:
        timer.cancel()


@contextmanager
def stop_on_signals_and_orphaning(poll_seconds: float = 1.0):
    """Install the signal handlers and the run-worker watchdog for the duration of a training run."""
    stop = StopRequest()
    previous = {}
    for sig in STOP_SIGNALS:
        previous[sig] = signal.signal(sig, lambda signum, _frame: stop.request(signal.Signals(signum).name))
    named = os.environ.get(WATCH_PID_ENV)
    stop.watching = int(named) if named else os.getppid()
    who = "run worker" if named else "parent process"
    done = threading.Event()

    def watch(process: psutil.Process | None) -> None:
        while process is not None and not _gone(process):
            if done.wait(poll_seconds):
                return
        stop.request(f"{who} {stop.watching} exited")

    if stop.watching > 1:  # 0 or 1: started by init (a container's entrypoint); there is nobody to outlive
        threading.Thread(target=watch, args=(_process(stop.watching),), name="ftpipe-run-watchdog",
                         daemon=True).start()
    try:
        yield stop
    finally:
        done.set()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _process(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)  # notes the start time, so that a reused pid is not taken for this process
    except psutil.NoSuchProcess:
        return None


def _gone(process: psutil.Process) -> bool:
    try:
        # is_running() compares start times; a killed process that nobody has reaped yet is a zombie.
        return not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
