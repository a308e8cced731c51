"""Errors in OpenAI's shape (``{"error": {"message", "type", "param", "code"}}``), which its SDKs raise as
typed exceptions (``BadRequestError``, ``NotFoundError``, ...) carrying the message."""

from __future__ import annotations

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "invalid_request_error",
          409: "conflict_error", 413: "invalid_request_error", 422: "invalid_request_error",
          429: "rate_limit_error"}


class ApiError(Exception):
    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 **extra) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.extra = status, message, param, code, extra

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": _TYPES.get(self.status, "api_error"),
                          "param": self.param, "code": self.code, **self.extra}}


def not_found(kind: str, ident: str, param: str | None = None) -> ApiError:
    # The same answer for another tenant's id as for one that never existed: ids are not a way to probe.
    shown = ident[:100].encode("utf-8", "replace").decode("utf-8")  # a lone surrogate cannot be sent back
    return ApiError(404, f"no {kind} '{shown}'", param=param, code=f"{kind.replace(' ', '_')}_not_found")


async def api_error_handler(_request: Request, exc: ApiError) -> JSONResponse:
    retry_after = exc.extra.get("retry_after")
    return JSONResponse(exc.body(), status_code=exc.status,
                        headers={"Retry-After": str(retry_after)} if retry_after else None)


async def http_error_handler(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
    """Starlette's own refusals (no such route or method, a body it cannot parse) in OpenAI's shape too."""
    code = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}.get(
        exc.status_code, "invalid_request")
    message = str(exc.detail)
    if exc.status_code == 400 and "parsing the body" in message:
        message = "the body is not valid JSON (UTF-8, at most 1,000 levels deep) or not a valid form"
    return JSONResponse(ApiError(exc.status_code, message, code=code).body(), status_code=exc.status_code,
                        headers=getattr(exc, "headers", None))


async def validation_error_handler(_request: Request, exc: RequestValidationError) -> JSONResponse:
    if any(e.get("loc") == ("body",) and e.get("type") in ("dict_type", "model_attributes_type")
           for e in exc.errors()):
        return JSONResponse(ApiError(400, "the body must be a JSON object sent as Content-Type: application/json",
                                     code="invalid_request").body(), status_code=400)
    first = exc.errors()[0] if exc.errors() else {}
    where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
    problems = "; ".join(f"'{'.'.join(str(p) for p in e.get('loc', ()) if p != 'body') or '(body)'}': "
                         f"{str(e.get('msg', ''))[:200]}" for e in exc.errors()[:10])
    return JSONResponse(ApiError(400, f"invalid request: {problems}", param=where or None,
                                 code="invalid_request").body(), status_code=400)
