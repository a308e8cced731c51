"""Jobs and their state, from the Dagster instance (runs) and the catalog (adapters)."""

from __future__ import annotations

from dataclasses import dataclass

from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

from ftpipe.catalog.adapters import AdapterRegistry
from sensors.failures import failure_reason
from sensors.run_tags import JOB_TAG, TENANT_TAG

FINISHED = {DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED}


@dataclass
class JobStatus:
    tenant: str
    job: str
    run_id: str
    status: str
    reason: str = ""
    metric: str = ""
    adapter: str = ""


def job_statuses(instance: DagsterInstance, registry: AdapterRegistry, tenant: str | None = None) -> list[JobStatus]:
    tags = {TENANT_TAG: tenant} if tenant else {}
    records = instance.get_run_records(RunsFilter(tags=tags))
    adapters = {a.run_id: a for a in registry.list(tenant)}
    latest: dict[tuple[str, str], JobStatus] = {}
    for run in [r.dagster_run for r in sorted(records, key=lambda r: r.create_timestamp)]:
        if TENANT_TAG not in run.tags:
            continue
        row = JobStatus(run.tags[TENANT_TAG], run.tags.get(JOB_TAG, "?"), run.run_id, run.status.value)
        if run.status == DagsterRunStatus.FAILURE:
            error_class, reason = failure_reason(instance, run)
            row.reason = f"[{error_class}] {reason}"
        if run.run_id in adapters:
            a = adapters[run.run_id]
            for metric in ("exact_match", "preference_accuracy"):  # SFT, DPO
                base, tuned = a.metrics.get(f"holdout_{metric}_base"), a.metrics.get(f"holdout_{metric}_tuned")
                if base is not None:
                    row.metric = f"{metric} {base:.2f} -> {tuned:.2f}"
            row.adapter = f"{a.path} ({a.status})"
        latest[(row.tenant, row.job)] = row
    return list(latest.values())


def format_table(rows: list[JobStatus], width: int = 100) -> str:
    headers = ["tenant", "job", "status", "held-out metric (base -> tuned)", "adapter / failure reason"]
    # A failed job shows why, even when it left a draft adapter behind (a failed quality gate).
    body = [[r.tenant, r.job, r.status, r.metric or "-", r.reason or r.adapter or "-"] for r in rows]
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(headers)]
    widths[-1] = min(widths[-1], width)

    def fmt(cells):
        return "  ".join(c[:w].ljust(w) for c, w in zip(cells, widths))

    out = [fmt(headers), fmt(["-" * w for w in widths])] + [fmt(b) for b in body]
    for r in rows:  # the full failure reason, which the table may cut
        if r.reason and len(r.reason) > widths[-1]:
            out.append(f"\n{r.tenant}/{r.job}: {r.reason}")
    return "\n".join(out)
