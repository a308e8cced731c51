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
        PlatformConfig.model_validate({"default_pool": "p",
                                       "pools": {"p": {"gpu": "cpu", "gpu_memory_gb": 8, "peak_tflops": 1}},
                                       "tiers": {"free": {"priority": 0}}, "tenants": {"a": {"tier": "gold"}}})


def test_hyperparameters_are_typed_and_a_bad_value_names_the_field():
    from ftpipe.manifest import ManifestError, parse_manifest

    ok = parse_manifest(b"base_model: x\ndataset: t.jsonl\nmethod: qlora\n"
                        b"hyperparameters: {qlora_compute_dtype: bfloat16, packing: true, epochs: 2}\n")
    assert ok.hyperparameters == {"qlora_compute_dtype": "bfloat16", "packing": True, "epochs": 2.0}
    for bad, message in [(b"{qlora_compute_dtype: int8}", "'qlora_compute_dtype': qlora_compute_dtype must be"),
                         (b"{packing: 'no'}", "'packing': must be true or false"),
                         (b"{epochs: lots}", "'epochs': must be a number, not 'lots'")]:
        with pytest.raises(ManifestError, match=message):
            parse_manifest(b"base_model: x\ndataset: t.jsonl\nhyperparameters: " + bad + b"\n")
