"""Choose and configure every resource from the environment, so that deployments switch without code changes.

    FTPIPE_HOME          local state root (default: <repo>/.ftpipe in a checkout, else ~/.ftpipe)
    FTPIPE_LANDING_URL   landing zone: a folder or s3://bucket/prefix (default: $FTPIPE_HOME/landing)
    FTPIPE_S3_ENDPOINT_URL, AWS_REGION   S3-compatible endpoint and region (credentials: the usual AWS variables)
    FTPIPE_ARTIFACTS     platform storage for snapshots, caches, checkpoints, adapters (default: $FTPIPE_HOME/artifacts)
    FTPIPE_MODEL_CACHE   built-in base models (default: <repo>/.cache/models, kept apart from per-demo state;
                         ~/.cache/ftpipe/models where installed from a wheel)
    FTPIPE_CATALOG       the catalog: a DuckDB file (default: $FTPIPE_HOME/catalog.duckdb) or a postgresql:// URL
    FTPIPE_TENANTS       platform tenant configuration (default: <repo>/tenants.yaml, else $FTPIPE_HOME/tenants.yaml)
    FTPIPE_TRAINER_BACKEND  local (a subprocess, default) or kubernetes (a pod per trainer, docs/kubernetes.md)
    FTPIPE_TRAINER_IMAGE, FTPIPE_K8S_NAMESPACE, FTPIPE_K8S_SERVICE_ACCOUNT   the trainer pod's image and placement
    FTPIPE_ARTIFACTS_CLAIM, FTPIPE_MODEL_CACHE_CLAIM   PVCs mounted in the pod at FTPIPE_ARTIFACTS / FTPIPE_MODEL_CACHE
"""

from __future__ import annotations

import os
from pathlib import Path

from resources.artifacts import ArtifactStoreResource
from resources.base_models import BaseModelsResource
from resources.catalog import CatalogResource
from resources.io_manager import TenantIOManager
from resources.landing_zone import LandingZoneResource
from resources.platform import PlatformResource
from resources.trainer import TrainerLauncherResource

REPO_ROOT = Path(__file__).resolve().parent.parent
# A checkout (make demo, make test) keeps its state beside the code; installed from a wheel, the code's parent is
# site-packages, and the state goes to the user's home.
CHECKOUT = REPO_ROOT if (REPO_ROOT / "pyproject.toml").is_file() else None


def ftpipe_home() -> Path:
    return Path(os.environ.get("FTPIPE_HOME", (CHECKOUT or Path.home()) / ".ftpipe"))


def tenants_file() -> str:
    return os.environ.get("FTPIPE_TENANTS", str((CHECKOUT or ftpipe_home()) / "tenants.yaml"))


def model_cache() -> str:
    default = CHECKOUT / ".cache" / "models" if CHECKOUT else Path.home() / ".cache" / "ftpipe" / "models"
    return os.environ.get("FTPIPE_MODEL_CACHE", str(default))


def resources_from_env() -> dict:
    home = ftpipe_home()
    env = os.environ.get
    return {
        "landing": LandingZoneResource(
            url=env("FTPIPE_LANDING_URL", str(home / "landing")),
            endpoint_url=env("FTPIPE_S3_ENDPOINT_URL"),
            region_name=env("AWS_REGION", env("AWS_DEFAULT_REGION")),
        ),
        "artifacts": ArtifactStoreResource(root=env("FTPIPE_ARTIFACTS", str(home / "artifacts"))),
        "io_manager": TenantIOManager(root=env("FTPIPE_ARTIFACTS", str(home / "artifacts"))),
        "base_models": BaseModelsResource(cache_dir=model_cache(),
                                          tenants_file=tenants_file()),
        "catalog": CatalogResource(location=env("FTPIPE_CATALOG", str(home / "catalog.duckdb"))),
        "platform": PlatformResource(tenants_file=tenants_file()),
        "trainer": TrainerLauncherResource(
            backend=env("FTPIPE_TRAINER_BACKEND", "local"),  # type: ignore[arg-type]  # pydantic checks the Literal
            image=env("FTPIPE_TRAINER_IMAGE"),
            namespace=env("FTPIPE_K8S_NAMESPACE"),
            service_account=env("FTPIPE_K8S_SERVICE_ACCOUNT"),
            artifacts_claim=env("FTPIPE_ARTIFACTS_CLAIM"),
            artifacts_mount=env("FTPIPE_ARTIFACTS", str(home / "artifacts")),
            model_cache_claim=env("FTPIPE_MODEL_CACHE_CLAIM"),
            model_cache_mount=model_cache(),
        ),
    }
