"""The API application: OpenAI's files and fine-tuning routes, scoped to the caller's tenant.

``create_app`` takes the same resources the Dagster definitions use, so the API reads and writes the same
landing zone, catalog and instance as the pipeline; ``ftpipe serve-api`` runs it under uvicorn.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ftpipe_api import adapters, files, jobs
from ftpipe_api.context import ApiContext
from ftpipe_api.errors import ApiError, api_error_handler, http_error_handler, validation_error_handler

MAX_JSON_BYTES = 1 << 20
"""A job request is a few hundred bytes; only uploads (``/v1/files``) carry data."""


def create_app(api: ApiContext) -> FastAPI:
    app = FastAPI(title="ftpipe fine-tuning API",
                  description="OpenAI-compatible fine-tuning API in front of the ftpipe landing zone. "
                              "Authenticate with `Authorization: Bearer <API key>` (`ftpipe api-keys create`).",
                  version="1")
    app.state.api = api
    # The ignores: Starlette types a handler as taking any Exception, though it calls each with its own class only.
    app.add_exception_handler(ApiError, api_error_handler)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, validation_error_handler)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, http_error_handler)  # type: ignore[arg-type]

    @app.middleware("http")
    async def bounded_bodies(request: Request, call_next):
        # Declared sizes only: a body sent without Content-Length (chunked) is bounded by uvicorn's own limits.
        declared = request.headers.get("content-length", "0")
        limit = api.max_file_bytes + (1 << 20) if request.url.path == "/v1/files" else MAX_JSON_BYTES
        if not declared.isdigit() or int(declared) > limit:
            what = f"a file may have at most {api.max_file_bytes:,} bytes" if request.url.path == "/v1/files" \
                else "a JSON request is a few hundred bytes"
            error = ApiError(413, f"request body over {limit:,} bytes: {what}", code="request_too_large")
            return JSONResponse(error.body(), status_code=413)
        return await call_next(request)

    app.include_router(files.router)
    app.include_router(jobs.router)
    app.include_router(adapters.router)
    return app


def app_from_env() -> FastAPI:
    """The app on this deployment's resources (the FTPIPE_* variables) and DAGSTER_HOME's instance."""
    from dagster import DagsterInstance

    from resources import resources_from_env

    return create_app(ApiContext.from_resources(resources_from_env(), DagsterInstance.get))
