import pytest

from ftpipe.manifest import ManifestError, parse_manifest
from ftpipe.tenants import PlatformConfig, load_platform_config


def test_minimal_manifest_gets_defaults():
    m = parse_manifest("base_model: ftpipe/tiny-llama\ndataset: train.jsonl\n")
    assert (m.method, m.objective, m.eval_dataset) == ("lora", "sft", None)


@pytest.mark.parametrize("text, field", [
    ("dataset: train.jsonl\n", "base_model"),
    ("base_model: m\ndataset: ../other/train.jsonl\n", "dataset"),
    ("base_model: m\ndataset: t.jsonl\nhyperparameters: {learning_rate: 1e-3, warp_speed: 9}\n", "hyperparameters"),
    ("base_model: m\ndataset: t.jsonl\ntier: premium\n", "tier"),  # the tier is the platform's, not the tenant's
    ("base_model: m\ndataset: t.jsonl\nmethod: magic\n", "method"),
])
def test_errors_name_the_file_and_field(text, field):
    with pytest.raises(ManifestError, match=rf"jobs/x/manifest.yaml: .*field '{field}"):
        parse_manifest(text, source="jobs/x/manifest.yaml")


def test_invalid_yaml_names_the_line():
    with pytest.raises(ManifestError, match=r"manifest.yaml line 3: not valid YAML: found character '\\t'"):
        parse_manifest("base_model: m\ndataset: t.jsonl\n\tbad: 1\n")


def test_repo_tenants_file_is_valid():
    from resources.settings import REPO_ROOT

    config = load_platform_config(REPO_ROOT / "tenants.yaml")
    assert config.tier_of("acme").priority > config.tier_of("initech").priority


def test_unknown_tier_is_refused():
    with pytest.raises(ValueError, match="unknown tier 'gold'"):
        PlatformConfig.model_validate({"default_pool": "p", "pools": {"p": {"gpu": "cpu", "gpu_memory_gb": 8, "peak_tflops": 1}},
                                       "tiers": {"free": {"priority": 0}}, "tenants": {"a": {"tier": "gold"}}})
