"""The ``Idempotency-Key`` header on POSTs: a retried request gets the first one's answer, never a second job.

A key holds for the tenant's requests with the same body; another body under the same key is refused (422),
and a retry that arrives while the first request is still working is told to come back (409). A request that
fails is not recorded: its retry runs again.
"""

from __future__ import annotations

import hashlib
import json
from typing import Callable

from fastapi import Request

from ftpipe.catalog.idempotency import MAX_KEY_CHARS, Claimed, InProgress, Mismatch, Replay
from ftpipe_api.errors import ApiError

HEADER = "idempotency-key"


def idempotent(request: Request, api, tenant: str, body: dict, work: Callable[[], dict]) -> dict:
    key = request.headers.get(HEADER)
    if key is None:
        return work()
    if not key or len(key) > MAX_KEY_CHARS:
        raise ApiError(400, f"Idempotency-Key must be 1-{MAX_KEY_CHARS} characters", param=HEADER,
                       code="invalid_idempotency_key")
    digest = hashlib.sha256(json.dumps([request.url.path, body], sort_keys=True, default=str).encode()).hexdigest()
    scoped = f"{request.method} {request.url.path} {key}"
    outcome = api.idempotency.claim(tenant, scoped, digest)
    if isinstance(outcome, Replay):
        return outcome.body
    if isinstance(outcome, Mismatch):
        raise ApiError(422, "this Idempotency-Key was used with a different request body; use a new key for a new "
                            "request", param=HEADER, code="idempotency_key_reused")
    if isinstance(outcome, InProgress):
        raise ApiError(409, "a request with this Idempotency-Key is still being processed; retry shortly",
                       param=HEADER, code="idempotency_key_in_use")
    assert isinstance(outcome, Claimed)
    try:
        response = work()
    except BaseException:
        api.idempotency.release(tenant, scoped)
        raise
    api.idempotency.finish(tenant, scoped, 200, response)
    return response
