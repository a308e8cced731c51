"""Configurable Dagster resources, and the one place that reads the environment to choose them."""

from resources.artifacts import ArtifactStoreResource
from resources.base_models import BaseModelsResource
from resources.catalog import CatalogResource
from resources.io_manager import TenantIOManager
from resources.landing_zone import LandingZoneResource
from resources.platform import PlatformResource
from resources.settings import resources_from_env
from resources.trainer import TrainerLauncherResource

__all__ = [
    "ArtifactStoreResource", "BaseModelsResource", "CatalogResource", "LandingZoneResource",
    "PlatformResource", "TenantIOManager", "TrainerLauncherResource", "resources_from_env",
]
