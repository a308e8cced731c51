"""Tenants' API keys, issued and revoked by operators (``ftpipe api-keys``), stored only as SHA-256 digests.

A key reads ``ftp_<key id>_<secret>``. The id finds the row; the digest of the whole key is compared in
constant time. The secret holds 256 random bits, so a fast digest is enough (GitHub and Stripe store their
tokens so): a slow password hash protects secrets people choose, which these are not. A leaked catalog
therefore yields no usable key, and the key itself is shown once, when it is issued.
"""

from __future__ import annotations

import builtins
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import datetime

from ftpipe.catalog.db import CatalogTable
from partitions.keys import validate_name

_KEY = re.compile(r"ftp_([0-9a-f]{12})_([A-Za-z0-9_-]{43})")


@dataclass(frozen=True)
class ApiKey:
    key_id: str
    tenant: str
    name: str
    created_at: datetime
    revoked_at: datetime | None

    @property
    def active(self) -> bool:
        return self.revoked_at is None


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class ApiKeys(CatalogTable):
    def issue(self, tenant: str, name: str = "") -> tuple[ApiKey, str]:
        """A new key for ``tenant``: its record and the key itself, which is not stored and cannot be shown again."""
        validate_name("tenant", tenant)
        key_id = secrets.token_hex(6)
        token = f"ftp_{key_id}_{secrets.token_urlsafe(32)}"
        with self._connect() as con:
            con.execute("INSERT INTO api_keys (key_id, tenant, name, digest, created_at) VALUES (?, ?, ?, ?, now())",
                        [key_id, tenant, name[:200], _digest(token)])
        return self.get(key_id), token

    def tenant_of(self, token: str) -> str | None:
        """The tenant an active key belongs to; None for anything else (malformed, unknown, revoked)."""
        match = _KEY.fullmatch(token) if isinstance(token, str) else None
        if not match or not self._exists():
            return None
        with self._connect() as con:
            row = con.execute("SELECT tenant, digest, revoked_at FROM api_keys WHERE key_id = ?",
                              [match.group(1)]).fetchone()
        if row is None or row[2] is not None or not hmac.compare_digest(row[1], _digest(token)):
            return None
        return row[0]

    def revoke(self, key_id: str) -> ApiKey:
        with self._connect() as con:
            con.execute("UPDATE api_keys SET revoked_at = now() WHERE key_id = ? AND revoked_at IS NULL", [key_id])
        return self.get(key_id)

    def get(self, key_id: str) -> ApiKey:
        found = self._select("WHERE key_id = ?", [key_id])
        if not found:
            raise LookupError(f"no API key {key_id!r}")
        return found[0]

    def list(self, tenant: str | None = None) -> list[ApiKey]:
        if not self._exists():
            return []
        return self._select("WHERE tenant = ?", [tenant]) if tenant else self._select("", [])

    def delete_tenant(self, tenant: str) -> int:
        if not self._exists():
            return 0
        with self._connect() as con:
            return len(con.execute("DELETE FROM api_keys WHERE tenant = ? RETURNING key_id", [tenant]).fetchall())

    def _select(self, where: str, params: builtins.list) -> builtins.list[ApiKey]:
        with self._connect() as con:
            rows = con.execute(f"SELECT key_id, tenant, name, created_at, revoked_at FROM api_keys {where} "
                               "ORDER BY created_at", params).fetchall()
        return [ApiKey(*row) for row in rows]
