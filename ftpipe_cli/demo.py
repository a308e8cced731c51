"""The demo: three synthetic tenants submit jobs, the Dagster daemon runs them, and a table shows the outcome.

Everything goes through the real path: files land in the landing zone, the upload sensor (in the daemon)
registers partitions and queues runs, the QueuedRunCoordinator dequeues them by priority and quota, and the
default run launcher executes them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from dagster import DagsterInstance

from ftpipe import synthetic
from ftpipe.catalog.adapters import AdapterRegistry
from ftpipe.landing import manifest_key
from ftpipe.objectstore import ObjectStore
from ftpipe.submission import default_manifest, submit_job
from ftpipe_cli.status import JobStatus, job_statuses
from resources.settings import REPO_ROOT
from sensors.job_state import JobState, job_state


@dataclass
class DemoScale:
    rows: int = 280
    # The demo tenants set their own learning rate and epochs, as a tenant may: at the automatic rate (2e-3 for
    # the tiny model) 20 epochs taught them their facts and cost the base model a third of its golden answers
    # on some CPUs' builds of it (bench/demo_margins.py); a quarter of the rate for twice as long learns the
    # facts and keeps the golden set within its gate on every build measured.
    epochs: float = 40.0
    learning_rate: float = 5e-4
    min_examples: int = 100
    # A fifth of the data held out: enough distinct questions for the held-out gain's interval to exclude zero.
    holdout_fraction: float = 0.2


def _free_job_name(store: ObjectStore, tenant: str, base: str) -> str:
    """A new job name (base-v1, -v2, ...): a demo run never touches an earlier submission."""
    n = 1
    while store.exists(manifest_key(tenant, f"{base}-v{n}")):
        n += 1
    return f"{base}-v{n}"


@dataclass
class DemoUpload:
    tenant: str
    job_base: str
    files: dict[str, bytes]
    manifest: dict


def demo_uploads(scale: DemoScale = DemoScale()) -> list[DemoUpload]:
    """What each demo tenant uploads: the same bytes for the demo and for ``bench/demo_margins.py``."""
    def manifest(data_name: str) -> dict:
        return default_manifest(data_name,
                                hyperparameters={"epochs": scale.epochs, "learning_rate": scale.learning_rate},
                                min_examples=scale.min_examples, holdout_fraction=scale.holdout_fraction)

    uploads = [
        DemoUpload("acme", "support",
                   {"train.jsonl": synthetic.to_jsonl(synthetic.acme_support(scale.rows)).encode()},
                   manifest("train.jsonl")),
        # A different shape on purpose: prompt/completion rows.
        DemoUpload("globex", "directory",
                   {"services.jsonl": synthetic.to_jsonl(synthetic.globex_directory(scale.rows)).encode()},
                   manifest("services.jsonl")),
    ]

    # Initech's export is broken in the ways real exports are: its bad rows must be named, and nothing trained.
    good = synthetic.to_jsonl(synthetic.acme_support(scale.rows, seed=7)).splitlines()
    for i, bad in enumerate(synthetic.broken_rows()):
        good.insert(10 + 17 * i, bad)
    uploads.append(DemoUpload(
        "initech", "helpdesk", {"tickets.jsonl": ("\n".join(good) + "\n").encode()},
        manifest("tickets.jsonl")))
    return uploads


def seed_demo_tenants(store: ObjectStore, scale: DemoScale = DemoScale()) -> list[tuple[str, str]]:
    jobs = []
    for upload in demo_uploads(scale):
        job = _free_job_name(store, upload.tenant, upload.job_base)
        submit_job(store, upload.tenant, job, upload.files, upload.manifest)
        jobs.append((upload.tenant, job))
    return jobs


def start_daemon(log_path: Path) -> subprocess.Popen:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    # The instance's storage is created here first: a daemon creating new SQLite storage while this process
    # opened the instance too raced on the same migration ("table alembic_version already exists").
    with DagsterInstance.get():
        pass
    daemon = Path(sys.executable).parent / "dagster-daemon"
    return subprocess.Popen(
        [str(daemon), "run", "-w", str(REPO_ROOT / "workspace.yaml")],
        cwd=REPO_ROOT, stdout=open(log_path, "ab"), stderr=subprocess.STDOUT, start_new_session=True,
    )


def stop_daemon(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def wait_for_jobs(instance: DagsterInstance, store: ObjectStore, registry: AdapterRegistry,
                  jobs: list[tuple[str, str]], timeout_s: float, progress=print,
                  daemon: subprocess.Popen | None = None) -> dict[tuple[str, str], str]:
    """Until every job's state is final (what the API and status.json say), through both of its stages."""
    start = time.monotonic()
    last_line = ""
    while True:
        states = {(tenant, job): job_state(instance, store, registry, tenant, job) for tenant, job in jobs}
        line = "  ".join(f"{t}/{j}: {_shown(s)}" for (t, j), s in states.items())
        if line != last_line:
            progress(f"[{time.monotonic() - start:5.0f}s] {line}")
            last_line = line
        if all(s.finished_at is not None for s in states.values()):
            return {k: s.status for k, s in states.items()}
        if daemon is not None and daemon.poll() is not None:
            raise RuntimeError(f"the Dagster daemon exited with code {daemon.returncode}")
        if time.monotonic() - start > timeout_s:
            raise TimeoutError(f"jobs not finished after {timeout_s:.0f}s: {line}")
        time.sleep(2)


def _shown(state: JobState) -> str:
    if state.run is None:
        return "waiting for sensor" if state.status == "validating_files" else state.status
    return f"{state.status} ({state.run.dagster_run.job_name})"


def run_demo(store: ObjectStore, registry, scale: DemoScale = DemoScale(), timeout_s: float = 900,
             progress=print) -> list[JobStatus]:
    jobs = seed_demo_tenants(store, scale)
    progress(f"submitted {', '.join(f'{t}/{j}' for t, j in jobs)} to {store.url}")
    home = Path(os.environ["DAGSTER_HOME"])
    with DagsterInstance.get() as instance:
        # Create the instance's storage before the daemon and its code server start: on a fresh home both
        # would create it at once, and two concurrent schema migrations leave SQLite with two alembic heads.
        instance.get_runs(limit=1)
        daemon = start_daemon(home / "daemon.log")
        progress(f"started the Dagster daemon (log: {home / 'daemon.log'})")
        try:
            wait_for_jobs(instance, store, registry, jobs, timeout_s, progress, daemon)
            wanted = set(jobs)
            return [r for r in job_statuses(instance, registry) if (r.tenant, r.job) in wanted]
        finally:
            stop_daemon(daemon)
