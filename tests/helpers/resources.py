"""The platform's resources on local folders under one root: what tests and benchmarks run the assets with."""

from __future__ import annotations

import os
from pathlib import Path


def local_resources_at(root: Path, tenants_file: Path) -> dict:
    """Landing zone, artifacts, catalog and IO manager under ``root``; base models from the shared model cache."""
    from resources import (
        ArtifactStoreResource,
        BaseModelsResource,
        CatalogResource,
        LandingZoneResource,
        PlatformResource,
        TenantIOManager,
        TrainerLauncherResource,
    )

    return {
        "landing": LandingZoneResource(url=str(root / "landing")),
        "artifacts": ArtifactStoreResource(root=str(root / "artifacts")),
        "io_manager": TenantIOManager(root=str(root / "artifacts")),
        "base_models": BaseModelsResource(cache_dir=os.environ["FTPIPE_MODEL_CACHE"]),
        "catalog": CatalogResource(location=str(root / "catalog.duckdb")),
        "platform": PlatformResource(tenants_file=str(tenants_file)),
        "trainer": TrainerLauncherResource(),
    }
