"""Asset checks that belong to one tenant job: every check result carries its partition, so the asset graph,
an asset's Checks tab and GraphQL show one job's checks, not every tenant's mixed together."""

from __future__ import annotations

import warnings

from dagster import AssetCheckResult, AssetCheckSeverity, AssetCheckSpec

from partitions.tenant_jobs import tenant_jobs_partitions


def check_spec(name: str, asset: str, description: str, blocking: bool = False) -> AssetCheckSpec:
    # Partitioned checks are a preview feature in Dagster 1.13; they are what makes per-job history possible.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*partitions_def on an AssetCheckSpec.*")
        return AssetCheckSpec(name, asset=asset, description=description, blocking=blocking,
                              partitions_def=tenant_jobs_partitions)


def warning_check_specs(asset: str, kinds) -> list[AssetCheckSpec]:
    return [check_spec(kind, asset, f"warning: {kind.replace('_', ' ')}") for kind in kinds]


def warning_check_results(warnings_found, kinds) -> list[AssetCheckResult]:
    """One WARN check per warning kind, so that the UI shows each kind's history on its own."""
    found = {w.kind: w for w in warnings_found}
    return [
        AssetCheckResult(
            check_name=kind, passed=kind not in found, severity=AssetCheckSeverity.WARN,
            description=str(found[kind]) if kind in found else None,
            metadata={"count": found[kind].count if kind in found else 0},
        )
        for kind in kinds
    ]
