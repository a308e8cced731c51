"""The adapter registry: one DuckDB row per trained adapter, with its lineage and evaluation.

Each connection is short-lived because several run workers (separate processes) write to the same file and
DuckDB allows one writer process at a time; a writer that finds the file locked waits and retries.
"""

from __future__ import annotations

import json
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import duckdb

STATUSES = ("draft", "promoted", "deprecated", "archived")

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
)
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


class AdapterRegistry:
    def __init__(self, db_path: str | Path, lock_timeout_s: float = 60.0):
        self.db_path = Path(db_path)
        self.lock_timeout_s = lock_timeout_s

    @contextmanager
    def _connect(self):
        self.db_path.parent.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + self.lock_timeout_s
        while True:
            try:
                con = duckdb.connect(str(self.db_path))
                break
            except duckdb.IOException as exc:
                if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        try:
            con.execute(_SCHEMA)
            yield con
        finally:
            con.close()

    @staticmethod
    def new_adapter_id(tenant: str, job: str) -> str:
        return f"{tenant}--{job}--{uuid.uuid4().hex[:8]}"

    def register(self, record: AdapterRecord) -> None:
        if record.status not in STATUSES:
            raise ValueError(f"unknown status {record.status!r}")
        with self._connect() as con:
            con.execute(
                "INSERT INTO adapters VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [record.adapter_id, record.tenant, record.job, record.run_id, record.base_model, record.base_digest,
                 record.dataset_digest, record.config_hash, record.method, record.lora_rank, record.path,
                 json.dumps(record.metrics), record.status, record.created_at],
            )

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


def now_utc() -> datetime:
    return datetime.now(timezone.utc)
