"""The adapter registry: one DuckDB row per trained adapter, with its lineage and evaluation.

A row never changes except for its status, which only moves forward: draft -> promoted -> deprecated ->
archived (a draft may also be deprecated). What was registered is immutable: a new fine-tune is a new
adapter_id, and ``register`` refuses an id it already holds.

The catalog file is shared with the usage ledger; ``ftpipe.catalog.db`` explains its short-lived connections.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone

from ftpipe.catalog.db import CatalogTable

STATUSES = ("draft", "promoted", "deprecated", "archived")
TRANSITIONS = {"draft": {"promoted", "deprecated"}, "promoted": {"deprecated"}, "deprecated": {"archived"},
               "archived": set()}


class RegistryError(ValueError):
    pass

_SCHEMA = """
CREATE TABLE IF NOT EXISTS adapters (
    adapter_id      VARCHAR PRIMARY KEY,
    tenant          VARCHAR NOT NULL,
    job             VARCHAR NOT NULL,
    run_id          VARCHAR NOT NULL,
    base_model      VARCHAR NOT NULL,
    base_digest     VARCHAR NOT NULL,
    dataset_digest  VARCHAR NOT NULL,
    config_hash     VARCHAR NOT NULL,
    method          VARCHAR NOT NULL,
    lora_rank       INTEGER,
    path            VARCHAR NOT NULL,
    metrics         JSON,
    status          VARCHAR NOT NULL,
    created_at      TIMESTAMPTZ NOT NULL
);
ALTER TABLE adapters ADD COLUMN IF NOT EXISTS status_changed_at TIMESTAMPTZ;
"""


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


class AdapterRegistry(CatalogTable):
    SCHEMA = _SCHEMA

    @staticmethod
    def new_adapter_id(tenant: str, job: str) -> str:
        return f"{tenant}--{job}--{uuid.uuid4().hex[:8]}"

    def register(self, record: AdapterRecord) -> None:
        if record.status not in STATUSES:
            raise ValueError(f"unknown status {record.status!r}")
        with self._connect() as con:
            if con.execute("SELECT 1 FROM adapters WHERE adapter_id = ?", [record.adapter_id]).fetchone():
                raise RegistryError(f"adapter {record.adapter_id} is already registered; a registered adapter never "
                                    "changes (a new fine-tune is a new adapter)")
            con.execute(
                "INSERT INTO adapters VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [record.adapter_id, record.tenant, record.job, record.run_id, record.base_model, record.base_digest,
                 record.dataset_digest, record.config_hash, record.method, record.lora_rank, record.path,
                 json.dumps(record.metrics), record.status, record.created_at, record.created_at],
            )

    def set_status(self, adapter_id: str, status: str, at: datetime | None = None) -> AdapterRecord:
        """Move an adapter forward in its lifecycle; anything else is refused with the allowed moves."""
        record = self.get(adapter_id)
        if status not in TRANSITIONS[record.status]:
            allowed = ", ".join(sorted(TRANSITIONS[record.status])) or "none"
            raise RegistryError(f"adapter {adapter_id} is {record.status}: it cannot become {status} "
                                f"(allowed: {allowed})")
        with self._connect() as con:
            con.execute("UPDATE adapters SET status = ?, status_changed_at = ? WHERE adapter_id = ?",
                        [status, at or now_utc(), adapter_id])
        return self.get(adapter_id)

    def delete_tenant(self, tenant: str) -> list[str]:
        """Erase a tenant's rows (``ftpipe delete-tenant``): the one exception to immutability, because a
        tenant's right to be forgotten outranks the registry's history. Returns the deleted adapter ids."""
        if not self.db_path.exists():
            return []
        with self._connect() as con:
            ids = [r[0] for r in con.execute("SELECT adapter_id FROM adapters WHERE tenant = ?", [tenant]).fetchall()]
            con.execute("DELETE FROM adapters WHERE tenant = ?", [tenant])
        return ids

    def get(self, adapter_id: str) -> AdapterRecord:
        found = [r for r in self.list() if r.adapter_id == adapter_id]
        if not found:
            raise RegistryError(f"no adapter {adapter_id!r} in the registry")
        return found[0]

    def list(self, tenant: str | None = None) -> list[AdapterRecord]:
        if not self.db_path.exists():
            return []
        with self._connect() as con:
            sql = "SELECT * FROM adapters" + (" WHERE tenant = ?" if tenant else "") + " ORDER BY created_at"
            rows = con.execute(sql, [tenant] if tenant else []).fetchall()
            cols = [d[0] for d in con.description]
        out = []
        for row in rows:
            data = dict(zip(cols, row))
            data["metrics"] = json.loads(data["metrics"]) if data["metrics"] else {}
            out.append(AdapterRecord(**data))
        return out

    def for_run(self, run_id: str) -> AdapterRecord | None:
        return next((r for r in self.list() if r.run_id == run_id), None)

    def for_training(self, tenant: str, job: str, config_hash: str, dataset_digest: str) -> AdapterRecord | None:
        """The adapter already registered from this very training (same spec, same data), if any: a run that
        resumed a finished training registers nothing new."""
        return next((r for r in self.list(tenant) if (r.job, r.config_hash, r.dataset_digest)
                     == (job, config_hash, dataset_digest)), None)


def now_utc() -> datetime:
    return datetime.now(timezone.utc)
