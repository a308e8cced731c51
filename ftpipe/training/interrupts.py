"""Requests to stop training early: preemption and spot signals, and the death of the run worker.

Dagster forwards a run's termination to a Pipes subprocess as SIGINT; Kubernetes and spot reclaim send
SIGTERM; SIGUSR1 is the platform's "checkpoint and yield" request. All three set one flag that the training
loop reads at the next step boundary, where it saves a checkpoint and stops cleanly, so the work lost is one
step, not a checkpoint interval.

A trainer must never outlive its run worker and keep holding a GPU, but a SIGKILLed run worker sends no
signal. A watchdog thread notices that the parent process has gone and raises the same flag.
"""

from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)


class StopRequest:
    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason: str | None = None

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
    """Install the signal handlers and the parent watchdog for the duration of a training run."""
    stop = StopRequest()
    previous = {}
    for sig in STOP_SIGNALS:
        previous[sig] = signal.signal(sig, lambda signum, _frame: stop.request(signal.Signals(signum).name))
    parent = os.getppid()
    done = threading.Event()

    def watch_parent() -> None:
        while not done.wait(poll_seconds):
            if os.getppid() != parent:
                stop.request(f"parent process {parent} exited")
                return

    watchdog = threading.Thread(target=watch_parent, name="ftpipe-parent-watchdog", daemon=True)
    watchdog.start()
    try:
        yield stop
    finally:
        done.set()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
