"""The API application: OpenAI's files and fine-tuning routes, scoped to the caller's tenant.

``create_app`` takes the same resources the Dagster definitions use, so the API reads and writes the same
landing zone, catalog and instance as the pipeline; ``ftpipe serve-api`` runs it under uvicorn.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError

from ftpipe_api import adapters, files, jobs
from ftpipe_api.context import ApiContext
from ftpipe_api.errors import ApiError, api_error_handler, validation_error_handler

DEFAULT_PORT = 8321


def create_app(api: ApiContext) -> FastAPI:
    app = FastAPI(title="ftpipe fine-tuning API",
                  description="OpenAI-compatible fine-tuning API in front of the ftpipe landing zone. "
                              "Authenticate with `Authorization: Bearer <API key>` (`ftpipe api-keys create`).",
                  version="1")
    app.state.api = api
    app.add_exception_handler(ApiError, api_error_handler)
    app.add_exception_handler(RequestValidationError, validation_error_handler)
    app.include_router(files.router)
    app.include_router(jobs.router)
    app.include_router(adapters.router)
    return app


def app_from_env() -> FastAPI:
    """The app on this deployment's resources (the FTPIPE_* variables) and DAGSTER_HOME's instance."""
    from dagster import DagsterInstance

    from resources import resources_from_env

    return create_app(ApiContext.from_resources(resources_from_env(), DagsterInstance.get))
