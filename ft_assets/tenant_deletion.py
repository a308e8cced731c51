"""``ftpipe delete-tenant T``: erase everything the platform holds of one tenant, and say what it erased.

A tenant's things live in four places, each keyed by the tenant's validated name, so no other tenant's data
is touched: the landing zone (``tenants/T/``: uploads and reports), the artifact store (``tenants/T/``:
snapshots, tokenized caches, checkpoints, served adapters), the adapter registry (rows with ``tenant = T``)
the API's rows in the same catalog (keys, uploaded files, job requests, idempotency keys) and the Dagster
instance (the tenant's dynamic partitions, and its runs with their event logs and captured
logs; the values passed between its assets live in its artifact folder, ``resources.io_manager``). The
serving fleet's files are rewritten without the tenant's adapters.

Deletion refuses while any of the tenant's runs is queued or running: a run started before the deletion
would write after it. Cancel them first.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

from ftpipe.artifacts import ArtifactLayout
from ftpipe.catalog.adapters import AdapterRegistry
from ftpipe.catalog.api_keys import ApiKeys
from ftpipe.catalog.files import TenantFiles
from ftpipe.catalog.idempotency import IdempotencyKeys
from ftpipe.catalog.job_requests import JobRequests
from ftpipe.catalog.vllm import rewrite_from_registry
from ftpipe.objectstore import ObjectStore
from partitions.keys import SEPARATOR, validate_name
from partitions.run_tags import TENANT_TAG
from partitions.tenant_jobs import TENANT_JOBS_PARTITIONS

UNFINISHED = [DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING,
              DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING]


class TenantBusy(RuntimeError):
    pass


@dataclass
class DeletionReport:
    tenant: str
    landing_objects: int = 0
    artifact_files: int = 0
    adapters: list[str] = field(default_factory=list)
    api_keys: int = 0
    partitions: list[str] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)

    def to_text(self) -> str:
        return "\n".join([
            f"deleted tenant {self.tenant}:",
            f"  landing zone objects (uploads, reports):               {self.landing_objects}",
            f"  artifact files (snapshots, caches, checkpoints, adapters): {self.artifact_files}",
            f"  registry rows: {len(self.adapters)} {', '.join(self.adapters)}".rstrip(),
            f"  API keys: {self.api_keys} (and the tenant's API file and job records)",
            f"  Dagster partitions: {len(self.partitions)} {', '.join(self.partitions)}".rstrip(),
            f"  Dagster runs with their event and captured logs: {len(self.runs)}",
            "kept: the tenant's rows in the GPU usage ledger (billing records: GPU-seconds per run, no data)",
        ])


def delete_tenant(tenant: str, instance: DagsterInstance, store: ObjectStore, layout: ArtifactLayout,
                  registry: AdapterRegistry, serving_dir: str | Path) -> DeletionReport:
    validate_name("tenant", tenant)
    runs = instance.get_runs(RunsFilter(tags={TENANT_TAG: tenant}))
    busy = [r.run_id for r in runs if r.status in UNFINISHED]
    if busy:
        raise TenantBusy(f"tenant {tenant} has {len(busy)} queued or running run(s): {', '.join(busy)}; "
                         "cancel them first (Dagster UI, or `dagster run delete`), then delete the tenant")
    report = DeletionReport(tenant)
    # The registry and the serving files first: from here on the fleet no longer loads the tenant's adapters.
    report.adapters = registry.delete_tenant(tenant)
    report.api_keys = ApiKeys(registry.location).delete_tenant(tenant)
    for table in (TenantFiles, JobRequests, IdempotencyKeys):
        table(registry.location).delete_tenant(tenant)
    rewrite_from_registry(registry, serving_dir)
    report.landing_objects = store.delete_prefix(f"tenants/{tenant}/")
    tenant_dir = layout.tenant_dir(tenant)
    if tenant_dir.exists():
        report.artifact_files = sum(1 for p in tenant_dir.rglob("*") if p.is_file())
        shutil.rmtree(tenant_dir)
    for key in instance.get_dynamic_partitions(TENANT_JOBS_PARTITIONS):
        if key.startswith(f"{tenant}{SEPARATOR}"):
            instance.delete_dynamic_partition(TENANT_JOBS_PARTITIONS, key)
            report.partitions.append(key)
    for run in runs:
        instance.delete_run(run.run_id)  # the run and its event log
        instance.compute_log_manager.delete_logs(prefix=[run.run_id])  # its captured stdout and stderr
        report.runs.append(run.run_id)
    return report
