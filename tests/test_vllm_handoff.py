"""The vLLM handoff: promoted adapters per base model, with the rank flag they need."""

from datetime import datetime, timezone

from dagster import materialize

from ft_assets.serving import vllm_serving_config
from ftpipe.catalog.adapters import AdapterRecord
from ftpipe.catalog.vllm import serving_configs, write_serving_configs
from resources import ArtifactStoreResource, CatalogResource


def _record(adapter_id, base, rank, status):
    return AdapterRecord(adapter_id=adapter_id, tenant=adapter_id.split("--")[0], job="j", run_id=adapter_id,
                         base_model=base, base_digest="d", dataset_digest="d", config_hash="c", method="lora",
                         lora_rank=rank, path=f"/adapters/{adapter_id}", metrics={}, status=status,
                         created_at=datetime.now(timezone.utc))


RECORDS = [_record("acme--a--1", "org/llama-8b", 16, "promoted"),
           _record("globex--b--2", "org/llama-8b", 48, "promoted"),
           _record("acme--c--3", "org/llama-8b", 256, "draft"),
           _record("initech--d--4", "ftpipe/tiny-llama", 8, "promoted")]


def test_only_promoted_adapters_are_served_and_the_rank_flag_covers_them():
    by_base = {c.base_model: c for c in serving_configs(RECORDS)}
    llama = by_base["org/llama-8b"]
    assert llama.lora_modules == {"acme--a--1": "/adapters/acme--a--1", "globex--b--2": "/adapters/globex--b--2"}
    assert llama.max_lora_rank == 64  # 48 rounded up to a rank vLLM accepts; the draft's 256 does not count
    assert llama.args() == ["--enable-lora", "--max-lora-rank", "64", "--max-loras", "2", "--lora-modules",
                            "acme--a--1=/adapters/acme--a--1", "globex--b--2=/adapters/globex--b--2"]
    assert by_base["ftpipe/tiny-llama"].max_lora_rank == 8


def test_files_per_base_model_and_a_base_with_nothing_promoted_is_dropped(tmp_path):
    write_serving_configs(serving_configs(RECORDS), tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ftpipe__tiny-llama.args", "ftpipe__tiny-llama.json", "org__llama-8b.args", "org__llama-8b.json"]
    write_serving_configs(serving_configs(RECORDS[:2]), tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["org__llama-8b.args", "org__llama-8b.json"]


def test_the_asset_writes_what_the_registry_holds(tmp_path):
    catalog = CatalogResource(location=str(tmp_path / "catalog.duckdb"))
    for record in RECORDS:
        catalog.adapters().register(record)
    artifacts = ArtifactStoreResource(root=str(tmp_path / "artifacts"))
    result = materialize([vllm_serving_config], resources={"catalog": catalog, "artifacts": artifacts})
    assert result.success
    args = (tmp_path / "artifacts" / "serving" / "org__llama-8b.args").read_text()
    assert args.startswith("--enable-lora --max-lora-rank 64 --max-loras 2 --lora-modules acme--a--1=")
