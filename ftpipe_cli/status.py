"""Jobs and their state, from the Dagster instance (runs) and the catalog (adapters)."""

from __future__ import annotations

from dataclasses import dataclass

from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

from ftpipe.catalog.adapters import AdapterRegistry
from partitions.run_tags import FINETUNE_JOB, JOB_TAG, TENANT_TAG
from sensors.failures import failure_reason


@dataclass
class JobStatus:
    tenant: str
    job: str
    run_id: str
    status: str
    stage: str = FINETUNE_JOB
    """The job of the newest run: ``prepare`` until the GPU run is queued."""
    reason: str = ""
    metric: str = ""
    """The held-out score, base -> tuned, and the gain with its interval."""
    golden: str = ""
    """The golden set's exact-match change and answer perplexity ratio, with their intervals."""
    adapter: str = ""


def job_statuses(instance: DagsterInstance, registry: AdapterRegistry, tenant: str | None = None) -> list[JobStatus]:
    tags = {TENANT_TAG: tenant} if tenant else {}
    records = instance.get_run_records(RunsFilter(tags=tags))
    adapters = {a.run_id: a for a in registry.list(tenant)}
    latest: dict[tuple[str, str], JobStatus] = {}
    for run in [r.dagster_run for r in sorted(records, key=lambda r: r.create_timestamp)]:
        if TENANT_TAG not in run.tags:
            continue
        row = JobStatus(run.tags[TENANT_TAG], run.tags.get(JOB_TAG, "?"), run.run_id, run.status.value, run.job_name)
        if run.status == DagsterRunStatus.FAILURE:
            error_class, reason = failure_reason(instance, run)
            row.reason = f"[{error_class}] {reason}"
        if run.run_id in adapters:
            a = adapters[run.run_id]
            row.metric, row.golden = _held_out(a.metrics), _golden(a.metrics)
            row.adapter = f"{a.path} ({a.status})"
        latest[(row.tenant, row.job)] = row
    return list(latest.values())


def _interval(metrics: dict, name: str, fmt: str) -> str:
    """``+0.42 [+0.30, +0.55]``; just the value for adapters registered before intervals were kept."""
    if name not in metrics:
        return ""
    if f"{name}_low" not in metrics:
        return format(metrics[name], fmt)
    return f"{metrics[name]:{fmt}} [{metrics[f'{name}_low']:{fmt}}, {metrics[f'{name}_high']:{fmt}}]"


def _held_out(metrics: dict) -> str:
    for metric in ("exact_match", "preference_accuracy"):  # SFT, DPO
        base, tuned = metrics.get(f"holdout_{metric}_base"), metrics.get(f"holdout_{metric}_tuned")
        if base is not None:
            gain = _interval(metrics, "holdout_delta", "+.2f") or f"{tuned - base:+.2f}"
            return f"{metric} {base:.2f} -> {tuned:.2f}, gain {gain}"
    return ""


def _golden(metrics: dict) -> str:
    change = _interval(metrics, "golden_exact_match_delta", "+.2f")
    if not change:
        base, tuned = metrics.get("golden_exact_match_base"), metrics.get("golden_exact_match_tuned")
        change = f"{tuned - base:+.2f}" if base is not None else ""
    ratio = _interval(metrics, "golden_perplexity_ratio", ".2f")
    return f"EM {change}" + (f", ppl x{ratio}" if ratio else "") if change else ""


def format_table(rows: list[JobStatus], width: int = 100) -> str:
    headers = ["tenant", "job", "status", "held-out (base -> tuned, gain [95% interval])",
               "golden set change [95% interval]", "adapter / failure reason"]
    # A failed job shows why, even when it left a draft adapter behind (a failed quality gate).
    body = [[r.tenant, r.job, r.status if r.stage == FINETUNE_JOB else f"{r.status} ({r.stage})", r.metric or "-",
             r.golden or "-", r.reason or r.adapter or "-"] for r in rows]
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(headers)]
    widths[-1] = min(widths[-1], width)

    def fmt(cells):
        return "  ".join(c[:w].ljust(w) for c, w in zip(cells, widths))

    out = [fmt(headers), fmt(["-" * w for w in widths])] + [fmt(b) for b in body]
    for r in rows:  # the full failure reason, which the table may cut
        if r.reason and len(r.reason) > widths[-1]:
            out.append(f"\n{r.tenant}/{r.job}: {r.reason}")
    return "\n".join(out)
