"""``Authorization: Bearer <key>`` to the key's tenant; every route is scoped to it."""

from __future__ import annotations

import math

from fastapi import Request

from ftpipe_api.errors import ApiError


def tenant_of(request: Request) -> str:
    api = request.app.state.api
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    tenant = api.keys.tenant_of(token.strip()) if scheme.lower() == "bearer" else None
    if tenant is None:
        raise ApiError(401, "missing or invalid API key (Authorization: Bearer ftp_...); an operator issues keys "
                            "with `ftpipe api-keys create --tenant <tenant>`", code="invalid_api_key")
    wait = api.limiter.allow(token.strip().split("_")[1])
    if wait:
        raise ApiError(429, f"too many requests for this API key; retry in {wait:.1f} s", code="rate_limit_exceeded",
                       retry_after=math.ceil(wait))
    return tenant
