"""Idempotency keys for the API's POSTs, as Stripe and the IETF's Idempotency-Key draft define them.

The first request with a key claims it (a row with no response yet), does its work and stores its response;
the same key with the same request body gets that stored response back, the same key with another body is
refused, and a request that arrives while the first is still working is told to retry. A request that fails
before it has an answer releases its claim, so a retry does the work. Keys are per tenant: one tenant's key
never answers another's request.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

from ftpipe.catalog.db import CatalogTable

MAX_KEY_CHARS = 255


@dataclass(frozen=True)
class Claimed:
    """This request holds the key: do the work, then ``finish`` (or ``release`` on failure)."""


@dataclass(frozen=True)
class Replay:
    status_code: int
    body: dict


@dataclass(frozen=True)
class Mismatch:
    """The key was used with another request body."""


@dataclass(frozen=True)
class InProgress:
    """The first request with this key has not finished yet."""


class IdempotencyKeys(CatalogTable):
    def claim(self, tenant: str, key: str, request_digest: str) -> Claimed | Replay | Mismatch | InProgress:
        claim = uuid.uuid4().hex
        with self._connect() as con:
            con.execute("INSERT INTO idempotency_keys (tenant, key, request_digest, claim, created_at) "
                        "VALUES (?, ?, ?, ?, now()) ON CONFLICT DO NOTHING",
                        [tenant, key, request_digest, claim])
            # The row as it stands after the insert: ours if it was new, the first request's otherwise.
            digest, holder, status, response = con.execute(
                "SELECT request_digest, claim, status_code, response FROM idempotency_keys "
                "WHERE tenant = ? AND key = ?", [tenant, key]).fetchone()
        if digest != request_digest:
            return Mismatch()
        if status is not None:
            return Replay(status, json.loads(response))
        return Claimed() if holder == claim else InProgress()

    def finish(self, tenant: str, key: str, status_code: int, body: dict) -> None:
        with self._connect() as con:
            con.execute("UPDATE idempotency_keys SET status_code = ?, response = ? WHERE tenant = ? AND key = ?",
                        [status_code, json.dumps(body), tenant, key])

    def release(self, tenant: str, key: str) -> None:
        with self._connect() as con:
            con.execute("DELETE FROM idempotency_keys WHERE tenant = ? AND key = ? AND status_code IS NULL",
                        [tenant, key])

    def delete_tenant(self, tenant: str) -> None:
        if self._exists():
            with self._connect() as con:
                con.execute("DELETE FROM idempotency_keys WHERE tenant = ?", [tenant])
