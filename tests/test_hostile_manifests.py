"""A hostile tenant's manifests against the real upload sensor tick.

Every case is one job of the tenant ``evil``, uploaded into the same landing zone as a good job of the tenant
``good`` and the files of a ``victim``. One tick sees them all. For each case the test asserts the named
error in evil's results area; for all of them together, that nothing of evil queued, that good's job did,
that nothing outside the landing zone (a read-only sentinel tree) or in the victim's prefix changed, and
that no secret of theirs reached anything evil can read.
"""

import os
import stat
from pathlib import Path

import pytest
from dagster import build_sensor_context, instance_for_test

from ftpipe.landing import results_key
from ftpipe.submission import submit_job
from resources import BaseModelsResource, CatalogResource, LandingZoneResource, PlatformResource
from sensors.uploads import upload_sensor

SECRET = "sk-victim-0f9e8d7c6b5a"
GOOD_DATA = b'{"prompt": "q", "completion": "a"}\n'
OK = "base_model: ftpipe/tiny-llama\ndataset: train.jsonl\n"


def _manifest(extra: str) -> bytes:
    return (OK + extra).encode()


# job name -> (manifest bytes, or a callable that makes the manifest entry itself; expected words in rejected.md)
TEXT_CASES = {
    "path-abs": (b"base_model: {sentinel}\ndataset: train.jsonl\n", "field 'base_model':"),
    "path-model-no-config": (b"base_model: {sentinel}/model\ndataset: train.jsonl\n", "paths are not accepted"),
    "path-empty": (b"base_model: ''\ndataset: train.jsonl\n", "is not a base-model id"),
    "path-dot": (b"base_model: .\ndataset: train.jsonl\n", "is not a base-model id"),
    "path-traversal": (b"base_model: ../../victim/jobs/v1\ndataset: train.jsonl\n", "is not a base-model id"),
    "path-victim-adapter": (b"base_model: {landing}/tenants/victim\ndataset: train.jsonl\n", "paths are not accepted"),
    "model-300-chars": (b"base_model: " + b"m" * 300 + b"\ndataset: train.jsonl\n", "is not a base-model id"),
    "model-unregistered": (b"base_model: nobody/no-such-model\ndataset: train.jsonl\n",
                           "'nobody/no-such-model' is not registered on this platform"),
    "model-mapping": (b"base_model: {a: b}\ndataset: train.jsonl\n",
                      "field 'base_model': Input should be a valid string"),
    "int-5000-digits": (_manifest("min_examples: " + "9" * 5000 + "\n"), "a number has far more digits"),
    "huge-manifest": (b"# " + b"x" * (50 << 20) + b"\n" + OK.encode(), "over the limit of 65,536 bytes"),
    "lora-r-10e400": (_manifest("hyperparameters: {lora_r: 1e400}\n"), "'lora_r': must be a whole number"),
    "seq-len-inf": (_manifest("hyperparameters: {max_seq_len: 1.0e400}\n"), "'max_seq_len': must be a whole number"),
    "yaml-20000-deep": (b"base_model: " + b"[" * 20000 + b"]" * 20000 + b"\n", "nested deeper than 8 levels"),
    "yaml-deep-mapping": (b"a:\n" + b"".join(b" " * (i + 1) + b"a:\n" for i in range(100)), "nested deeper"),
    "yaml-alias-bomb": (b"a: &a [x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a]\n"
                        b"c: [*b, *b, *b, *b, *b, *b, *b, *b]\n", "anchors and aliases are not allowed"),
    "yaml-python-tag": (b"base_model: !!python/object/apply:os.system ['touch {sentinel}/pwned']\n"
                        b"dataset: train.jsonl\n", "not valid YAML"),
    "yaml-invalid": (b"base_model: m\n\tdataset: x\n", "not valid YAML"),
    "yaml-list": (b"- base_model\n- dataset\n", "expected a mapping of fields, got list"),
    "yaml-empty": (b"", "expected a mapping of fields, got NoneType"),
    "binary": (bytes(range(256)) * 4, "not UTF-8 text"),
    "lr-nan": (_manifest("hyperparameters: {learning_rate: .nan}\n"), "'learning_rate': must be a finite number"),
    "lr-negative": (_manifest("hyperparameters: {learning_rate: -1}\n"), "'learning_rate': must be above 0"),
    "batch-zero": (_manifest("hyperparameters: {micro_batch_size: 0}\n"), "'micro_batch_size': must be between 1"),
    "rank-negative": (_manifest("hyperparameters: {lora_r: -5}\n"), "'lora_r': must be between 1"),
    "dropout-five": (_manifest("hyperparameters: {lora_dropout: 5}\n"),
                     "'lora_dropout': must be at least 0 and at most 0.9"),
    "epochs-inf": (_manifest("hyperparameters: {epochs: .inf}\n"), "'epochs': must be a finite number"),
    "epochs-billion": (_manifest("hyperparameters: {epochs: 1e9}\n"), "'epochs': must be above 0 and at most 100"),
    "steps-fraction": (_manifest("hyperparameters: {max_steps: 2.5}\n"), "'max_steps': must be a whole number"),
    "seed-negative": (_manifest("hyperparameters: {seed: -1}\n"), "'seed': must be between 0"),
    "packing-maybe": (_manifest("hyperparameters: {packing: maybe}\n"), "'packing': must be true or false"),
    "hyper-list": (_manifest("hyperparameters: [1, 2]\n"),
                   "field 'hyperparameters': Input should be a valid dictionary"),
    "hyper-many-keys": (_manifest("hyperparameters: {" + ", ".join(f"k{i}: 1" for i in range(5000)) + "}\n"),
                        "more than 500 values"),
    "yaml-flat-list": (b"x: [" + b"1," * 30000 + b"1]\n", "more than 500 values"),
    "hyper-some-keys": (_manifest("hyperparameters: {" + ", ".join(f"k{i}: 1" for i in range(30)) + "}\n"),
                        "field 'hyperparameters':"),
    "rank-above-serving": (_manifest("hyperparameters: {lora_r: 128}\n"),
                           "128 is above the serving fleet's maximum rank 64"),
    "dora-unservable": (_manifest("method: dora\n"), "the serving fleet does not load DoRA adapters"),
    "eval-is-train": (_manifest("eval_dataset: train.jsonl\n"), "'eval_dataset' names the training file itself"),
    "tier-in-manifest": (_manifest("tier: premium\n"), "field 'tier': Extra inputs are not permitted"),
    "dataset-traversal": (b"base_model: ftpipe/tiny-llama\ndataset: ../../victim/jobs/v1/train.jsonl\n",
                          "field 'dataset':"),
    "dataset-control-char": (b"base_model: ftpipe/tiny-llama\ndataset: \"t\\x00.jsonl\"\n", "field 'dataset':"),
    "dataset-is-manifest": (b"base_model: ftpipe/tiny-llama\ndataset: manifest.yaml\n", "not the manifest itself"),
    "min-examples-zero": (_manifest("min_examples: 0\n"), "field 'min_examples'"),
    "holdout-nan": (_manifest("holdout_fraction: .nan\n"), "field 'holdout_fraction'"),
    "gates-many": (_manifest("quality_gates: {" + ", ".join(f"g{i}: '> 0'" for i in range(100)) + "}\n"),
                   "field 'quality_gates'"),
    "gate-unknown-metric": (_manifest("quality_gates: {secret_metric: '> 0'}\n"), "unknown metric"),
    "gate-never-passes": (_manifest("quality_gates: {holdout_exact_match: '>= 2'}\n"), "can never pass"),
    "gate-infinite": (_manifest("quality_gates: {holdout_exact_match: '>= 1e999'}\n"), "can never pass"),
    "gate-surrogate-key": (_manifest('quality_gates: {"\\ud800": ">= 1"}\n'), "unpaired UTF-16 surrogate"),
    "dataset-300-bytes": (("base_model: ftpipe/tiny-llama\ndataset: " + "€" * 100 + ".jsonl\n").encode(),
                          "is not a data file name"),
    "dataset-surrogate": (b'base_model: ftpipe/tiny-llama\ndataset: "\\ud800.jsonl"\n', "unpaired UTF-16 surrogate"),
}


def _links(landing: Path, sentinel: Path) -> dict:
    """Manifests that are not regular files: each refused by name, none read."""
    victim_manifest = landing / "tenants/victim/jobs/v1/manifest.yaml"
    assert victim_manifest.is_file()
    return {
        "manifest-symlink-secret": (lambda p: p.symlink_to(sentinel / "secrets.yaml"), "is a symbolic link"),
        "manifest-symlink-victim": (lambda p: p.symlink_to(victim_manifest), "is a symbolic link"),
        "manifest-hardlink": (lambda p: os.link(landing / "tenants/evil/jobs/lr-nan/manifest.yaml", p), "hard link"),
        "manifest-fifo": (lambda p: os.mkfifo(p), "manifest.yaml is a FIFO"),
    }


@pytest.fixture
def world(tmp_path):
    landing = tmp_path / "landing"
    sentinel = tmp_path / "sentinel"
    (sentinel / "model").mkdir(parents=True)
    (sentinel / "secrets.yaml").write_text(f"base_model: {SECRET}\napi_key: {SECRET}\n")
    (sentinel / "model" / "tokenizer.json").write_text(SECRET)
    platform_file = tmp_path / "tenants.yaml"
    platform_file.write_text(
        "default_pool: cpu-local\n"
        "pools:\n  cpu-local: {gpu: cpu, gpu_memory_gb: 8, peak_tflops: 0.081, mfu: 1.0}\n"
        "tiers:\n  premium: {priority: 10}\n  free: {priority: 0}\n"
        "tenants:\n  evil: {tier: free}\n  good: {tier: premium}\n  victim: {tier: premium}\n")
    store = LandingZoneResource(url=str(landing)).store()
    store.write_bytes("tenants/victim/jobs/v1/train.jsonl", f'{{"prompt": "{SECRET}", "completion": "a"}}\n'.encode())
    store.write_bytes("tenants/victim/jobs/v1/manifest.yaml", f"# {SECRET}\n{OK}".encode())
    store.write_bytes("tenants/victim/results/v1/eval_report.md", SECRET.encode())
    for path in [sentinel, *sentinel.rglob("*")]:  # read-only, as the host's files are to the platform
        path.chmod(0o555 if path.is_dir() else 0o444)
    yield landing, sentinel, platform_file
    for path in [sentinel, *sentinel.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)


def _snapshot(root: Path) -> dict:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() and not p.is_symlink() else None,
                                       p.lstat().st_mtime_ns) for p in sorted(root.rglob("*"))}


def _tick(landing: Path, platform_file: Path, instance, cursor=None):
    resources = {"landing": LandingZoneResource(url=str(landing)),
                 "platform": PlatformResource(tenants_file=str(platform_file)),
                 "base_models": BaseModelsResource(cache_dir=os.environ["FTPIPE_MODEL_CACHE"]),
                 "catalog": CatalogResource(location=str(platform_file.parent / "catalog.duckdb"))}
    return upload_sensor(build_sensor_context(instance=instance, resources=resources, cursor=cursor))


def test_every_hostile_manifest_gets_a_named_error_and_costs_the_others_nothing(world, tiny_model):
    landing, sentinel, platform_file = world
    store = LandingZoneResource(url=str(landing)).store()
    cases = {}
    for job, (body, expected) in TEXT_CASES.items():
        body = body.replace(b"{sentinel}", str(sentinel).encode()).replace(b"{landing}", str(landing).encode())
        store.write_bytes(f"tenants/evil/jobs/{job}/train.jsonl", GOOD_DATA)
        store.write_bytes(f"tenants/evil/jobs/{job}/manifest.yaml", body)
        cases[job] = expected
    for job, (make, expected) in _links(landing, sentinel).items():
        folder = landing / "tenants/evil/jobs" / job
        folder.mkdir(parents=True)
        make(folder / "manifest.yaml")
        cases[job] = expected
    # Names the platform cannot take: ignored, never read.
    store.write_bytes("tenants/evil/jobs/Bad_Name/manifest.yaml", OK.encode())
    store.write_bytes("tenants/evil/jobs/" + "j" * 200 + "/manifest.yaml", OK.encode())
    (landing / "tenants/evil/jobs/dir-manifest/manifest.yaml").mkdir(parents=True)
    submit_job(store, "good", "support-v1", {"train.jsonl": GOOD_DATA},
               b"base_model: ftpipe/tiny-llama\ndataset: train.jsonl\n")
    assert len(cases) >= 45
    outside, victim = _snapshot(sentinel), _snapshot(landing / "tenants/victim")

    with instance_for_test() as instance:
        result = _tick(landing, platform_file, instance)
        assert sorted(r.partition_key for r in result.run_requests) == ["good__support-v1", "victim__v1"]
        assert sorted(result.dynamic_partitions_requests[0].partition_keys) == ["good__support-v1", "victim__v1"]
        cases["lr-nan"] = "hard link"  # it has two names now: neither is read
        for job, expected in cases.items():
            rejected = store.read_bytes(results_key("evil", job, "rejected.md")).decode()
            assert expected in rejected, (job, rejected)
            assert SECRET not in rejected, job
        written = {job: (landing / "tenants/evil/results" / job / "rejected.md").stat().st_mtime_ns for job in cases}

        # Each version is decided once: the next tick writes nothing and queues nothing.
        again = _tick(landing, platform_file, instance, cursor=result.cursor)
        assert again.run_requests == []
        assert {job: (landing / "tenants/evil/results" / job / "rejected.md").stat().st_mtime_ns
                for job in cases} == written

    assert _snapshot(sentinel) == outside and not (sentinel / "pwned").exists()
    assert _snapshot(landing / "tenants/victim") == victim
    assert not (landing / "tenants/evil/results/Bad_Name").exists()
    for path in (landing / "tenants/evil").rglob("*"):
        if path.is_file() and not path.is_symlink() and stat.S_ISREG(path.lstat().st_mode) and \
                path.lstat().st_nlink == 1:
            assert SECRET.encode() not in path.read_bytes(), path


def test_a_hard_link_to_another_tenants_file_is_read_under_neither_name(world, tiny_model):
    """Nothing tells which of two names of one file is the original, so neither is read: the victim's job is
    refused too (the platform cannot stop that; per-tenant accounts and fs.protected_hardlinks keep a tenant
    from linking a file it does not own, docs/security.md), but none of the victim's data reaches evil."""
    landing, _, platform_file = world
    store = LandingZoneResource(url=str(landing)).store()
    (landing / "tenants/evil/jobs/steal").mkdir(parents=True)
    os.link(landing / "tenants/victim/jobs/v1/manifest.yaml", landing / "tenants/evil/jobs/steal/manifest.yaml")
    with instance_for_test() as instance:
        result = _tick(landing, platform_file, instance)
    assert result.run_requests == []
    for tenant, job in (("evil", "steal"), ("victim", "v1")):
        rejected = store.read_bytes(results_key(tenant, job, "rejected.md")).decode()
        assert "is a hard link (the file has 2 names)" in rejected and SECRET not in rejected


def test_a_results_area_broken_by_its_tenant_stops_nobody(world, tiny_model):
    """Evil's results folder is a file, or a link to the victim's: its refusal cannot be written, and that
    neither raises nor writes anywhere else."""
    landing, sentinel, platform_file = world
    store = LandingZoneResource(url=str(landing)).store()
    store.write_bytes("tenants/evil/jobs/a/manifest.yaml", b"base_model: /etc\ndataset: t.jsonl\n")
    (landing / "tenants/evil/results").write_text("not a folder")
    submit_job(store, "good", "support-v1", {"train.jsonl": GOOD_DATA}, OK.encode())
    victim = _snapshot(landing / "tenants/victim")
    with instance_for_test() as instance:
        result = _tick(landing, platform_file, instance)
        assert sorted(r.partition_key for r in result.run_requests) == ["good__support-v1", "victim__v1"]
        assert (landing / "tenants/evil/results").read_text() == "not a folder"

        (landing / "tenants/evil/results").unlink()
        (landing / "tenants/evil/results").symlink_to(landing / "tenants/victim/results")
        store.write_bytes("tenants/evil/jobs/v1/manifest.yaml", b"base_model: /etc\ndataset: t.jsonl\n")
        again = _tick(landing, platform_file, instance, cursor=result.cursor)
        assert again.run_requests == []
    assert _snapshot(landing / "tenants/victim") == victim


def test_an_internal_error_on_one_manifest_refuses_that_job_only(world, tiny_model, monkeypatch):
    landing, _, platform_file = world
    store = LandingZoneResource(url=str(landing)).store()
    store.write_bytes("tenants/evil/jobs/boom/manifest.yaml", _manifest("hyperparameters: {lora_r: 8}\n"))
    submit_job(store, "good", "support-v1", {"train.jsonl": GOOD_DATA}, OK.encode())
    import sensors.uploads

    real_admit = sensors.uploads.admit

    def admit(manifest_bytes, source, *args):
        if "/evil/" in source:
            raise KeyError("num_attention_heads")  # e.g. a registered model whose config.json is '{}'
        return real_admit(manifest_bytes, source, *args)

    monkeypatch.setattr(sensors.uploads, "admit", admit)
    with instance_for_test() as instance:
        result = _tick(landing, platform_file, instance)
    assert sorted(r.partition_key for r in result.run_requests) == ["good__support-v1", "victim__v1"]
    rejected = store.read_bytes(results_key("evil", "boom", "rejected.md")).decode()
    assert "could not admit this job because of an internal error" in rejected


def test_a_tick_out_of_time_leaves_the_rest_for_the_next_tick(world, tiny_model, monkeypatch):
    landing, _, platform_file = world
    store = LandingZoneResource(url=str(landing)).store()
    for i in range(3):
        submit_job(store, "good", f"job-{i}", {"train.jsonl": GOOD_DATA}, OK.encode())
    # four manifests in all with the victim's: three ticks of at least one each, and the rest in a fourth
    import sensors.uploads

    monkeypatch.setattr(sensors.uploads, "TICK_BUDGET_SECONDS", 0.0)
    with instance_for_test() as instance:
        first = _tick(landing, platform_file, instance)
        assert len(first.run_requests) == 1  # the first manifest is always admitted: every tick makes progress
        second = _tick(landing, platform_file, instance, cursor=first.cursor)
        third = _tick(landing, platform_file, instance, cursor=second.cursor)
        fourth = _tick(landing, platform_file, instance, cursor=third.cursor)
        assert [len(t.run_requests) for t in (first, second, third, fourth)] == [1, 1, 1, 1]
    queued = [r.partition_key for tick in (first, second, third, fourth) for r in tick.run_requests]
    assert sorted(queued) == ["good__job-0", "good__job-1", "good__job-2", "victim__v1"]
    assert queued[0] == "victim__v1"  # the tenant with the fewest new manifests goes first


def test_a_flood_of_manifests_from_one_tenant_delays_no_other_tenant(world, tiny_model, monkeypatch):
    """'aaa' sorts first and uploads 40 manifests at once; 'zzz' uploads one. Even a tick with time for a single
    admission takes zzz's."""
    landing, _, platform_file = world
    platform_file.write_text(platform_file.read_text() + "  aaa: {tier: free}\n  zzz: {tier: free}\n")
    store = LandingZoneResource(url=str(landing)).store()
    for i in range(40):
        store.write_bytes(f"tenants/aaa/jobs/flood-{i}/manifest.yaml", b"x: [" + b"1," * 30000 + b"1]\n")
    submit_job(store, "zzz", "mine", {"train.jsonl": GOOD_DATA}, OK.encode())
    import sensors.uploads

    monkeypatch.setattr(sensors.uploads, "TICK_BUDGET_SECONDS", 0.0)
    with instance_for_test() as instance:
        first = _tick(landing, platform_file, instance)
        second = _tick(landing, platform_file, instance, cursor=first.cursor)
    assert [r.partition_key for r in first.run_requests + second.run_requests] == ["victim__v1", "zzz__mine"]
