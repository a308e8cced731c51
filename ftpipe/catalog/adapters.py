"""The adapter registry: one catalog row per trained adapter, with its lineage and evaluation.

A row never changes except for its status, which only moves forward: draft -> promoted -> deprecated ->
archived (a draft may also be deprecated). What was registered is immutable: a new fine-tune is a new
adapter_id, and ``register`` refuses an id it already holds.

The catalog is shared with the usage ledger; ``ftpipe.catalog.db`` explains its backends and connections.
"""

from __future__ import annotations

import builtins
import json
import uuid
from dataclasses import dataclass, fields
from datetime import datetime, timezone

from ftpipe.catalog.db import CatalogTable

STATUSES = ("draft", "promoted", "deprecated", "archived")
TRANSITIONS = {"draft": {"promoted", "deprecated"}, "promoted": {"deprecated"}, "deprecated": {"archived"},
               "archived": set()}


class RegistryError(ValueError):
    pass


@dataclass
class AdapterRecord:
    adapter_id: str
    tenant: str
    job: str
    run_id: str
    base_model: str
    base_digest: str
    dataset_digest: str
    config_hash: str
    method: str
    lora_rank: int | None
    path: str
    metrics: dict
    status: str
    created_at: datetime
    status_changed_at: datetime | None = None


_COLUMNS = tuple(f.name for f in fields(AdapterRecord))


class AdapterRegistry(CatalogTable):
    @staticmethod
    def new_adapter_id(tenant: str, job: str) -> str:
        return f"{tenant}--{job}--{uuid.uuid4().hex[:8]}"

    def register(self, record: AdapterRecord) -> None:
        if record.status not in STATUSES:
            raise ValueError(f"unknown status {record.status!r}")
        with self._connect() as con:
            written = con.execute(
                f"INSERT INTO adapters ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))}) "
                "ON CONFLICT DO NOTHING RETURNING adapter_id",
                [record.adapter_id, record.tenant, record.job, record.run_id, record.base_model, record.base_digest,
                 record.dataset_digest, record.config_hash, record.method, record.lora_rank, record.path,
                 json.dumps(record.metrics), record.status, record.created_at, record.created_at],
            ).fetchone()
        if written is None:
            raise RegistryError(f"adapter {record.adapter_id} is already registered; a registered adapter never "
                                "changes (a new fine-tune is a new adapter)")

    def set_status(self, adapter_id: str, status: str, at: datetime | None = None) -> AdapterRecord:
        """Move an adapter forward in its lifecycle; anything else is refused with the allowed moves."""
        record = self.get(adapter_id)
        if status not in TRANSITIONS[record.status]:
            allowed = ", ".join(sorted(TRANSITIONS[record.status])) or "none"
            raise RegistryError(f"adapter {adapter_id} is {record.status}: it cannot become {status} "
                                f"(allowed: {allowed})")
        with self._connect() as con:
            # Only from the status just read: of two processes making the same move, one makes it.
            moved = con.execute("UPDATE adapters SET status = ?, status_changed_at = ? "
                                "WHERE adapter_id = ? AND status = ? RETURNING adapter_id",
                                [status, at or now_utc(), adapter_id, record.status]).fetchone()
        if moved is None:
            return self.set_status(adapter_id, status, at)  # it moved meanwhile: judge the move from there
        return self.get(adapter_id)

    def delete_tenant(self, tenant: str) -> list[str]:
        """Erase a tenant's rows (``ftpipe delete-tenant``): the one exception to immutability, because a
        tenant's right to be forgotten outranks the registry's history. Returns the deleted adapter ids."""
        if not self._exists():
            return []
        with self._connect() as con:
            return [r[0] for r in con.execute("DELETE FROM adapters WHERE tenant = ? RETURNING adapter_id",
                                              [tenant]).fetchall()]

    def get(self, adapter_id: str) -> AdapterRecord:
        found = self._select("WHERE adapter_id = ?", [adapter_id])
        if not found:
            raise RegistryError(f"no adapter {adapter_id!r} in the registry")
        return found[0]

    def list(self, tenant: str | None = None) -> list[AdapterRecord]:
        return self._select("WHERE tenant = ?", [tenant]) if tenant else self._select("", [])

    def for_run(self, run_id: str) -> AdapterRecord | None:
        found = self._select("WHERE run_id = ?", [run_id])
        return found[0] if found else None

    def for_training(self, tenant: str, job: str, config_hash: str, dataset_digest: str) -> AdapterRecord | None:
        """The adapter already registered from this very training (same spec, same data), if any: a run that
        resumed a finished training registers nothing new."""
        found = self._select("WHERE tenant = ? AND job = ? AND config_hash = ? AND dataset_digest = ?",
                             [tenant, job, config_hash, dataset_digest])
        return found[0] if found else None

    def _select(self, where: str, params: builtins.list) -> builtins.list[AdapterRecord]:
        if not self._exists():
            return []
        with self._connect() as con:
            rows = con.execute(f"SELECT {', '.join(_COLUMNS)} FROM adapters {where} ORDER BY created_at, adapter_id",
                               params).fetchall()
        out = []
        for row in rows:
            data = dict(zip(_COLUMNS, row))
            data["metrics"] = json.loads(data["metrics"]) if data["metrics"] else {}
            out.append(AdapterRecord(**data))
        return out


def now_utc() -> datetime:
    return datetime.now(timezone.utc)
