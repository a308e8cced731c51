"""Files tenants upload through the API (``POST /v1/files``): one row each, the bytes in the landing zone.

A file is immutable once stored; deleting it marks the row and removes the bytes, and a job that already
copied it into its job folder keeps its copy.
"""

from __future__ import annotations

import builtins
import uuid
from dataclasses import dataclass
from datetime import datetime

from ftpipe.catalog.db import CatalogTable


@dataclass(frozen=True)
class TenantFile:
    file_id: str
    tenant: str
    filename: str
    purpose: str
    bytes: int
    sha256: str
    objective: str | None
    """What the file's examples train: ``sft`` or ``dpo``, as the upload's validation found."""
    created_at: datetime
    deleted_at: datetime | None


class TenantFiles(CatalogTable):
    @staticmethod
    def new_file_id() -> str:
        return f"file-{uuid.uuid4().hex[:24]}"

    def add(self, file_id: str, tenant: str, filename: str, purpose: str, size: int, sha256: str,
            objective: str | None) -> TenantFile:
        with self._connect() as con:
            con.execute("INSERT INTO tenant_files (file_id, tenant, filename, purpose, bytes, sha256, objective, "
                        "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, now())",
                        [file_id, tenant, filename, purpose, size, sha256, objective])
        added = self.get(tenant, file_id)
        assert added is not None  # just inserted under a new id, so it is there and not deleted
        return added

    def get(self, tenant: str, file_id: str) -> TenantFile | None:
        """The tenant's own file, not deleted; None for any other id, another tenant's included."""
        found = self._select("WHERE tenant = ? AND file_id = ? AND deleted_at IS NULL", [tenant, file_id])
        return found[0] if found else None

    def list(self, tenant: str) -> list[TenantFile]:
        return self._select("WHERE tenant = ? AND deleted_at IS NULL", [tenant])

    def mark_deleted(self, tenant: str, file_id: str) -> bool:
        with self._connect() as con:
            con.execute("UPDATE tenant_files SET deleted_at = now() WHERE tenant = ? AND file_id = ? "
                        "AND deleted_at IS NULL", [tenant, file_id])
        return self.get(tenant, file_id) is None

    def delete_tenant(self, tenant: str) -> None:
        if self._exists():
            with self._connect() as con:
                con.execute("DELETE FROM tenant_files WHERE tenant = ?", [tenant])

    def _select(self, where: str, params: builtins.list) -> builtins.list[TenantFile]:
        if not self._exists():
            return []
        with self._connect() as con:
            rows = con.execute(f"SELECT file_id, tenant, filename, purpose, bytes, sha256, objective, created_at, "
                               f"deleted_at FROM tenant_files {where} ORDER BY created_at", params).fetchall()
        return [TenantFile(*row) for row in rows]
