"""The registry's lifecycle: immutable rows, forward-only status, promotion re-checked, the fleet kept in step."""

import dataclasses
from datetime import datetime, timezone

import pytest

from ft_assets.lifecycle import adapter_lifecycle
from ftpipe.catalog.adapters import AdapterRecord, AdapterRegistry, RegistryError
from ftpipe_cli.main import main as ftpipe
from resources import ArtifactStoreResource, BaseModelsResource, CatalogResource, PlatformResource
from resources.settings import REPO_ROOT
from tests.test_serving_gate import _adapter


@pytest.fixture
def home(tmp_path, monkeypatch, tiny_model, catalog_at):
    monkeypatch.setenv("FTPIPE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("FTPIPE_TENANTS", str(REPO_ROOT / "tenants.yaml"))
    monkeypatch.setenv("FTPIPE_CATALOG", catalog_at)
    registry = AdapterRegistry(catalog_at)
    for adapter_id, kwargs in (("acme--good--1", {}), ("acme--dora--2", {"use_dora": True})):
        path = _adapter(tiny_model, tmp_path / adapter_id, **kwargs)
        registry.register(AdapterRecord(
            adapter_id=adapter_id, tenant="acme", job=adapter_id.split("--")[1], run_id=adapter_id,
            base_model=tiny_model.model_id, base_digest=tiny_model.digest, dataset_digest="d", config_hash="c",
            method="dora" if kwargs else "lora", lora_rank=8, path=str(path), metrics={}, status="draft",
            created_at=datetime.now(timezone.utc)))
    return tmp_path / "home", registry


def test_a_registered_adapter_cannot_be_registered_again(home):
    _, registry = home
    with pytest.raises(RegistryError, match="already registered; a registered adapter never changes"):
        registry.register(dataclasses.replace(registry.get("acme--good--1"), path="/elsewhere"))


def test_status_only_moves_forward(home):
    _, registry = home
    assert registry.set_status("acme--good--1", "promoted").status == "promoted"
    with pytest.raises(RegistryError, match="is promoted: it cannot become draft"):
        registry.set_status("acme--good--1", "draft")
    assert registry.set_status("acme--good--1", "deprecated").status_changed_at is not None
    registry.set_status("acme--good--1", "archived")
    with pytest.raises(RegistryError, match=r"allowed: none"):
        registry.set_status("acme--good--1", "promoted")


def test_cli_promotes_deprecates_and_keeps_the_vllm_files_in_step(home, capsys):
    root, _ = home
    assert ftpipe(["promote", "acme--good--1"]) == 0
    args = (root / "artifacts" / "serving" / "ftpipe__tiny-llama.args").read_text()
    assert "--lora-modules acme--good--1=" in args
    assert ftpipe(["promote", "acme--dora--2"]) == 2  # the fleet could not load it
    assert "cannot be served: DoRA adapters are not served" in capsys.readouterr().err
    assert ftpipe(["adapters", "--tenant", "acme"]) == 0
    listing = capsys.readouterr().out
    assert "acme--good--1  promoted" in listing and "acme--dora--2  draft" in listing
    assert ftpipe(["deprecate", "acme--good--1"]) == 0
    assert not (root / "artifacts" / "serving" / "ftpipe__tiny-llama.args").exists()  # nothing left to serve


def test_the_same_change_as_a_dagster_job(home):
    root, registry = home
    resources = {"catalog": CatalogResource(location=str(registry.location)),
                 "artifacts": ArtifactStoreResource(root=str(root / "artifacts")),
                 "base_models": BaseModelsResource(cache_dir=str(REPO_ROOT / ".cache" / "models")),
                 "platform": PlatformResource(tenants_file=str(REPO_ROOT / "tenants.yaml"))}
    result = adapter_lifecycle.execute_in_process(
        run_config={"ops": {"set_adapter_status": {"config": {"adapter_id": "acme--good--1", "status": "promoted"}}}},
        resources=resources)
    assert result.success and registry.get("acme--good--1").status == "promoted"


def test_deprecated_adapters_lose_their_files_after_the_grace_period_but_keep_their_row(home, tmp_path):
    from datetime import timedelta

    from ftpipe.catalog.lifecycle import retire_deprecated

    root, registry = home
    now = datetime.now(timezone.utc)
    registry.set_status("acme--good--1", "deprecated", at=now - timedelta(days=31))
    registry.set_status("acme--dora--2", "deprecated", at=now - timedelta(days=5))
    assert retire_deprecated(registry, now, root / "serving") == ["acme--good--1"]
    old, recent = registry.get("acme--good--1"), registry.get("acme--dora--2")
    assert old.status == "archived" and not (tmp_path / "acme--good--1").exists()
    assert recent.status == "deprecated" and (tmp_path / "acme--dora--2" / "adapter_config.json").exists()
