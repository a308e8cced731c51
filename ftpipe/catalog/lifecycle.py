"""The adapter lifecycle: promote and deprecate (an operator's CLI, a tenant's API call), retire after a grace period
(a Dagster job)."""

from __future__ import annotations

import shutil
from datetime import datetime, timedelta
from pathlib import Path

from ftpipe.basemodel.registry import BaseModelRegistry
from ftpipe.catalog.adapters import AdapterRecord, AdapterRegistry, RegistryError
from ftpipe.catalog.serving import ServingProfile, check_adapter
from ftpipe.catalog.vllm import rewrite_from_registry


def change_status(registry: AdapterRegistry, adapter_id: str, status: str, base_models: BaseModelRegistry,
                  profile: ServingProfile, serving_dir: str | Path) -> AdapterRecord:
    """Promotion re-checks that the fleet can serve the adapter; every change rewrites the fleet's files."""
    if status == "promoted":
        record = registry.get(adapter_id)
        problems = check_adapter(record.path, base_models.resolve(record.base_model), profile,
                                 trained_on_digest=record.base_digest).problems
        if problems:
            raise RegistryError(f"adapter {adapter_id} cannot be served: {'; '.join(problems)}")
    record = registry.set_status(adapter_id, status)
    rewrite_from_registry(registry, serving_dir)
    return record


DEPRECATION_GRACE = timedelta(days=30)


def retire_deprecated(registry: AdapterRegistry, now: datetime, serving_dir: str | Path,
                      grace: timedelta = DEPRECATION_GRACE) -> list[str]:
    """Delete the files of adapters deprecated longer than the grace period and mark them archived; the
    registry row stays, so the lineage of what was once served is never lost."""
    retired = []
    for record in registry.list():
        if record.status == "deprecated" and record.status_changed_at and now - record.status_changed_at > grace:
            shutil.rmtree(record.path, ignore_errors=True)
            registry.set_status(record.adapter_id, "archived", at=now)
            retired.append(record.adapter_id)
    if retired:
        rewrite_from_registry(registry, serving_dir)
    return retired
