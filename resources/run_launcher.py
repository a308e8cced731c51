"""The instance's run launcher for one machine: Dagster's DefaultRunLauncher, plus the run-worker health
check that its run monitoring needs and the default launcher lacks.

Dagster's run monitoring (``run_monitoring`` in dagster.yaml) fails a STARTED run whose worker is gone, which
frees its pool slot and lets the failure sensor resume it from its checkpoint. It asks the launcher whether
the worker lives; the Kubernetes launcher can answer (it asks for the pod), the default one cannot, so a run
whose worker died with its code server (a host or container restart, the daemon's process group killed)
stayed STARTED forever and held its slot. A worker that dies while its code server lives is caught by the
code server itself; this covers the rest.

The answer comes from the run's own event log: the code server records the worker's pid when it starts it
("Started process for run (pid: N)"). The worker lives if that pid is a live process that already existed
when the event was written (a recycled pid belongs to a younger process). Only a worker on this machine can
be checked: a run whose code server is reached over the network is reported running, as before.
"""

from __future__ import annotations

import json

import psutil
from dagster import DagsterEventType, DagsterRun, DefaultRunLauncher

# A run launcher's health check (what the run monitor calls) is typed by these, which Dagster exports under no
# public name; DefaultRunLauncher, which this one extends, imports them from the same place.
from dagster._core.launcher import CheckRunHealthResult, WorkerStatus
from dagster._core.storage.tags import GRPC_INFO_TAG

LOCAL_HOSTS = frozenset({None, "", "localhost", "127.0.0.1", "::1"})
CLOCK_SLACK_SECONDS = 2.0


def _worker_pid(instance, run_id: str) -> tuple[int, float] | None:
    """(pid, when it was logged) of the run's worker process, from the code server's engine event."""
    for record in instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT):
        data = record.dagster_event.engine_event_data
        pid = (data.metadata or {}).get("pid") if data else None
        if pid is not None and (record.message or "").startswith("Started process for run"):
            return int(pid.value), record.timestamp
    return None


def worker_status(pid: int, started_at: float) -> tuple[WorkerStatus, str]:
    try:
        process = psutil.Process(pid)
        alive = process.status() != psutil.STATUS_ZOMBIE
        created = process.create_time()
    except psutil.Error:
        return WorkerStatus.FAILED, f"the run worker (pid {pid}) is gone"
    if not alive:
        return WorkerStatus.FAILED, f"the run worker (pid {pid}) has exited"
    if created > started_at + CLOCK_SLACK_SECONDS:
        return WorkerStatus.FAILED, f"the run worker (pid {pid}) is gone; its pid now belongs to another process"
    return WorkerStatus.RUNNING, f"the run worker (pid {pid}) is running"


def _on_this_machine(run: DagsterRun) -> bool:
    info = json.loads(run.tags.get(GRPC_INFO_TAG, "{}") or "{}")
    return bool(info.get("socket")) or info.get("host") in LOCAL_HOSTS


class LocalRunLauncher(DefaultRunLauncher):
    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: DagsterRun) -> CheckRunHealthResult:
        if not _on_this_machine(run):
            return CheckRunHealthResult(WorkerStatus.RUNNING, "the run worker is on another machine; not checked")
        found = _worker_pid(self._instance, run.run_id)
        if found is None:
            # Between the run's start and the code server's note of its pid: nothing to check yet.
            return CheckRunHealthResult(WorkerStatus.RUNNING, "the run worker's pid is not recorded yet",
                                        transient=True)
        status, message = worker_status(*found)
        return CheckRunHealthResult(status, message, run_worker_id=str(found[0]))
