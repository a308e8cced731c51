"""Random bytes and random YAML at the manifest path: admission answers every one, and nothing escapes."""

import json
import os

import yaml
from dagster import build_sensor_context, instance_for_test
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ftpipe.admission import Admission, admit
from ftpipe.basemodel.registry import BaseModelRegistry
from ftpipe.manifest import ManifestError, parse_manifest
from ftpipe.tenants import PlatformConfig
from ftpipe.training.spec import OVERRIDABLE
from resources import BaseModelsResource, CatalogResource, LandingZoneResource, PlatformResource
from sensors.uploads import upload_sensor

CONFIG = PlatformConfig.model_validate({
    "default_pool": "cpu", "pools": {"cpu": {"gpu": "cpu", "gpu_memory_gb": 8, "peak_tflops": 0.08}},
    "tiers": {"free": {"priority": 0}}, "tenants": {"evil": {"tier": "free"}, "good": {"tier": "free"}}})
FIELDS = ["base_model", "dataset", "eval_dataset", "method", "objective", "holdout_fraction", "min_examples",
          "hyperparameters", "quality_gates", "learning_rate", "epochs", "lora_r", "max_seq_len", "tier"]

scalars = (st.none() | st.booleans() | st.integers() | st.integers(min_value=-10**500, max_value=10**500)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=300)
           | st.sampled_from(["ftpipe/tiny-llama", "train.jsonl", "/etc/passwd", "..", "lora", "dora", "dpo",
                              ".nan", "1e400", "-1", "0"]))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=5)
                      | st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=20), inner, max_size=6),
                      max_leaves=30)
manifests = st.fixed_dictionaries({"base_model": values, "dataset": values},
                                  optional={name: values for name in FIELDS[2:]})
hyperparameters = st.dictionaries(st.sampled_from(sorted(OVERRIDABLE)), scalars, max_size=6)
# Valid but for the hyperparameters and gates: these reach the range checks, the serving limits and routing.
nearly_valid = st.fixed_dictionaries(
    {"base_model": st.just("ftpipe/tiny-llama"), "dataset": st.just("train.jsonl")},
    optional={"hyperparameters": hyperparameters, "method": st.sampled_from(["lora", "qlora", "dora", "rslora"]),
              "objective": st.sampled_from(["sft", "dpo"]),
              "quality_gates": st.dictionaries(st.sampled_from(["holdout_delta", "golden_regression"]),
                                               st.text(max_size=20) | st.sampled_from(["> 0", "<= 1e999"]))})


def _dump(data) -> bytes:
    try:
        return yaml.safe_dump(data, allow_unicode=True).encode("utf-8", "surrogatepass")
    except (yaml.YAMLError, ValueError, OverflowError):
        return repr(data).encode("utf-8", "surrogatepass")


# Large inputs are the point here: the health checks that guard against them are off.
QUIET = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture]
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=QUIET)


def _answers(body: bytes, registry: BaseModelRegistry) -> Admission:
    admission = admit(body, "tenants/evil/jobs/j/manifest.yaml", CONFIG, registry)
    assert (admission.pool is None) != (admission.refusal is None)
    return admission


@FUZZ
@given(st.binary(max_size=4096))
def test_random_bytes_are_refused_or_admitted_never_raised(tiny_model, body):
    _answers(body, BaseModelRegistry(os.environ["FTPIPE_MODEL_CACHE"]))


@FUZZ
@given(manifests | nearly_valid)
def test_random_yaml_is_refused_or_admitted_never_raised(tiny_model, data):
    admission = _answers(_dump(data), BaseModelRegistry(os.environ["FTPIPE_MODEL_CACHE"]))
    try:
        parse_manifest(_dump(data))
    except ManifestError:
        assert admission.refusal is not None
    else:
        # A well-formed manifest is admitted, or refused for what only admission knows: the platform's base
        # models and its serving limits.
        assert admission.pool == "cpu" or any(reason in admission.refusal for reason in (
            "lora_r", "DoRA", "is not registered on this platform"))


@FUZZ
@given(st.text(alphabet=st.sampled_from(list("[]{}:-,&*!|>'\"#\n\t ab1.")), max_size=2000))
def test_random_yaml_syntax_is_refused_or_admitted_never_raised(tiny_model, text):
    _answers(text.encode(), BaseModelRegistry(os.environ["FTPIPE_MODEL_CACHE"]))


@settings(max_examples=5, deadline=None, suppress_health_check=QUIET)
@given(st.lists(st.binary(max_size=512) | manifests.map(_dump), min_size=5, max_size=10))
def test_a_tick_over_random_manifests_still_queues_the_good_job(tiny_model, tmp_path_factory, bodies):
    root = tmp_path_factory.mktemp("landing")
    store = LandingZoneResource(url=str(root)).store()
    for i, body in enumerate(bodies):
        store.write_bytes(f"tenants/evil/jobs/j{i}/manifest.yaml", body)
    store.write_bytes("tenants/good/jobs/ok/t.jsonl", b'{"prompt": "q", "completion": "a"}\n')
    store.write_bytes("tenants/good/jobs/ok/manifest.yaml", b"base_model: ftpipe/tiny-llama\ndataset: t.jsonl\n")
    platform = root / "tenants.yaml"
    platform.write_text(yaml.safe_dump(CONFIG.model_dump(mode="json")))
    resources = {"landing": LandingZoneResource(url=str(root)),
                 "platform": PlatformResource(tenants_file=str(platform)),
                 "base_models": BaseModelsResource(cache_dir=os.environ["FTPIPE_MODEL_CACHE"]),
                 "catalog": CatalogResource(location=str(root / "catalog.duckdb"))}
    with instance_for_test() as instance:
        result = upload_sensor(build_sensor_context(instance=instance, resources=resources))
    assert "good__ok" in [r.partition_key for r in result.run_requests]
    cursor = json.loads(result.cursor)
    for i in range(len(bodies)):
        # Refused, queued, or (a manifest that admits but names a file not uploaded) waiting for its data.
        assert (store.exists(f"tenants/evil/results/j{i}/rejected.md")
                or any(r.partition_key == f"evil__j{i}" for r in result.run_requests)
                or cursor[f"evil__j{i}"]["state"] == "waiting")
