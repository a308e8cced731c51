"""A hostile tenant's data files, through the upload sensor and the asset graph.

Each case is one job of the tenant ``evil`` whose manifest is fine, so the sensor queues it beside a good
job of the tenant ``good``; the trouble is in what the manifest points at. Each job then runs the real
``finetune`` job in process and must fail as the tenant's error, naming the file and what is wrong, with
nothing tokenized and nothing trained, and without reading the victim's files or anything outside the
landing zone (a read-only sentinel tree, and a secret that must never reach evil's results or artifacts).
"""

import gzip
import json
import os
from pathlib import Path

import pytest
from dagster import DagsterRunStatus, build_sensor_context, instance_for_test, materialize

from ft_assets.datasets import raw_dataset, tokenized_dataset, validated_dataset
from ft_assets.definitions import build_defs
from ftpipe import synthetic
from ftpipe.landing import results_key
from ftpipe.submission import submit_job
from resources import LandingZoneResource
from sensors.failures import failure_reason
from sensors.uploads import upload_sensor

pytestmark = pytest.mark.slow

SECRET = "sk-victim-0f9e8d7c6b5a"
ROWS = synthetic.to_jsonl(synthetic.acme_support(120)).encode()


def _manifest(dataset: str = "train.jsonl", base_model: str = "ftpipe/tiny-llama", **fields) -> bytes:
    extra = "".join(f"{k}: {json.dumps(v)}\n" for k, v in fields.items())
    return f"base_model: {base_model}\ndataset: {dataset}\nmin_examples: 10\n{extra}".encode()


def _file(data: bytes):
    return lambda path, world: path.write_bytes(data)


def _symlink(target: str):
    return lambda path, world: path.symlink_to(world[target])


def _respaced(line: bytes) -> bytes:
    """The same question with another system prompt, in other case and spacing."""
    messages = json.loads(line)["messages"]
    user = next(m for m in messages if m["role"] == "user")
    return json.dumps({"messages": [{"role": "system", "content": "Be brief."},
                                    {"role": "user", "content": "  " + user["content"].upper() + "  "},
                                    {"role": "assistant", "content": "Something else."}]}).encode() + b"\n"


_TRAIN_LINES = ROWS.splitlines(keepends=True)
_NEW_LINES = [json.dumps({"messages": [{"role": "user", "content": f"A question never trained on, number {i}?"},
                                       {"role": "assistant", "content": "An answer."}]}).encode() + b"\n"
              for i in range(7)]
EVAL_FILES = {
    "eval-inside-train": b"".join(_TRAIN_LINES[:20]),
    "eval-mostly-train": b"".join(_TRAIN_LINES[:14] + _NEW_LINES),
    "eval-train-respaced": b"".join(_respaced(line) for line in _TRAIN_LINES[:20]),
}


def _with_row(row: bytes):
    """The good rows with one hostile row at line 5: that row, and nothing else, is named."""
    lines = ROWS.splitlines(keepends=True)
    return _file(b"".join(lines[:4]) + row + b"\n" + b"".join(lines[4:]))


def _hardlink_own(path, world):
    path.write_bytes(ROWS)
    os.link(path, path.with_name("copy.jsonl"))


# job -> (how train.jsonl is made, manifest, words the tenant's failure must hold)
CASES = {
    "data-symlink-victim": (_symlink("victim_data"), _manifest(), "train.jsonl is a symbolic link"),
    "data-symlink-secret": (_symlink("secret"), _manifest(), "train.jsonl is a symbolic link"),
    "data-symlink-passwd": (lambda p, w: p.symlink_to("/etc/passwd"), _manifest(), "is a symbolic link"),
    "data-dir-symlink": (None, _manifest(), "is a symbolic link"),  # the job's data folder itself, below
    "data-hardlink": (_hardlink_own, _manifest(), "train.jsonl is a hard link (the file has 2 names)"),
    "data-fifo": (lambda p, w: os.mkfifo(p), _manifest(), "train.jsonl is a FIFO"),
    "data-directory": (lambda p, w: p.mkdir(), _manifest(), "train.jsonl is a directory"),
    "data-missing": (lambda p, w: None, _manifest(), "names 'train.jsonl', which is not in the job folder"),
    "data-too-large": (_file(ROWS * 80), _manifest(), "over the limit of"),
    "data-gzip": (_file(gzip.compress(ROWS)), _manifest(), "train.jsonl: this file is gzip-compressed"),
    "data-binary": (_file(bytes(range(256)) * 64), _manifest(), "looks binary (NUL bytes)"),
    "data-not-parquet": (_file(ROWS), _manifest("train.parquet"), "not a valid Parquet file"),
    "row-image-part": (_with_row(b'{"messages": [{"role": "user", "content": [{"type": "image_url", '
                                 b'"image_url": {"url": "file:///etc/passwd"}}]}, '
                                 b'{"role": "assistant", "content": "x"}]}'),
                       _manifest(), 'line 5, messages[0].content[0].type: "image_url" parts are not supported'),
    "row-nan": (_with_row(b'{"messages": [{"role": "user", "content": NaN}]}'), _manifest(),
                "line 5, record: invalid JSON: NaN/Infinity are not JSON numbers"),
    "row-surrogate": (_with_row(b'{"messages": [{"role": "user", "content": "\\ud800"}, '
                                b'{"role": "assistant", "content": "x"}]}'),
                      _manifest(), "line 5, messages[0].content: contains an unpaired UTF-16 surrogate"),
    "row-deep": (_with_row(b'{"messages": ' + b"[" * 5000 + b"]" * 5000 + b"}"), _manifest(),
                 "line 5, record: invalid JSON: nested too deeply"),
    "row-huge": (_with_row(b'{"messages": [{"role": "user", "content": "' + b"x" * 1_100_000 + b'"}]}'),
                 _manifest(), "line 5, record: record is 1,100,0"),
    "row-number": (_with_row(b'{"messages": [{"role": "user", "content": 5}, {"role": "assistant", "content": "x"}]}'),
                   _manifest(), "line 5, messages[0].content: expected a string, got int"),
    "data-wrong-suffix": (_file(ROWS), _manifest("train.txt"), "unsupported file type '.txt'"),
    "eval-inside-train": (_file(ROWS), _manifest(eval_dataset="eval.jsonl"),
                          "every example(s) of eval.jsonl are also in the training data"),
    "eval-mostly-train": (_file(ROWS), _manifest(eval_dataset="eval.jsonl"),
                          "14 of 21 example(s) of eval.jsonl are also in the training data"),
    "eval-train-respaced": (_file(ROWS), _manifest(eval_dataset="eval.jsonl"),
                            "every example(s) of eval.jsonl are also in the training data"),
    "holdout-too-small": (_file(b"".join(ROWS.splitlines(keepends=True)[:3])), _manifest(min_examples=1),
                          "the held-out split has"),
}


@pytest.fixture
def world(tmp_path, platform_file):
    landing = tmp_path / "landing"
    sentinel = tmp_path / "sentinel"
    sentinel.mkdir()
    (sentinel / "secret.jsonl").write_text(json.dumps({"prompt": SECRET, "completion": SECRET}) + "\n")
    store = LandingZoneResource(url=str(landing)).store()
    store.write_bytes("tenants/initech/jobs/v1/train.jsonl", json.dumps({"prompt": SECRET, "completion": "a"}).encode())
    sentinel.chmod(0o555)
    (sentinel / "secret.jsonl").chmod(0o444)
    # About 1.6 MB: the good data with one huge row fits, 80 copies of it do not.
    platform_file.write_text(platform_file.read_text().replace("premium: {priority: 10}",
                                                               "premium: {priority: 10, max_upload_gb: 0.0015}"))
    yield {"landing": landing, "sentinel": sentinel, "store": store,
           "victim_data": landing / "tenants/initech/jobs/v1/train.jsonl", "secret": sentinel / "secret.jsonl"}
    sentinel.chmod(0o755)


def _tree(root: Path) -> dict:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() and not p.is_symlink() else None)
            for p in sorted(root.rglob("*"))}


def test_hostile_data_files_fail_as_the_tenants_error_before_tokenization(world, local_resources, tmp_path):
    store, landing = world["store"], world["landing"]
    for job, (make, manifest, _) in CASES.items():
        folder = landing / "tenants/acme/jobs" / job
        if job == "data-dir-symlink":
            folder.parent.mkdir(parents=True, exist_ok=True)
            folder.symlink_to(landing / "tenants/initech/jobs/v1")
            continue
        folder.mkdir(parents=True)
        make(folder / {"data-wrong-suffix": "train.txt", "data-not-parquet": "train.parquet"}.get(job, "train.jsonl"),
             world)
        if job.startswith("eval-"):
            (folder / "eval.jsonl").write_bytes(EVAL_FILES[job])
        store.write_bytes(f"tenants/acme/jobs/{job}/manifest.yaml", manifest)
    submit_job(store, "initech", "good-v1", {"train.jsonl": ROWS}, _manifest())
    outside, victim = _tree(world["sentinel"]), _tree(landing / "tenants/initech/jobs")

    with instance_for_test() as instance:
        tick = upload_sensor(build_sensor_context(instance=instance, resources={
            k: local_resources[k] for k in ("landing", "base_models", "catalog", "platform")}))
        queued = sorted(r.partition_key for r in tick.run_requests)
        (added,) = tick.dynamic_partitions_requests
        instance.add_dynamic_partitions("tenant_jobs", list(added.partition_keys))  # as the daemon does
        instance.add_dynamic_partitions("tenant_jobs", ["acme__data-missing"])  # as a hand launch would
        # The folder that is a link to the victim's is refused by the sensor itself: its manifest is read
        # through a link.
        assert "acme__data-dir-symlink" not in queued
        assert "initech__good-v1" in queued
        # A manifest whose data is not there (yet) waits for it; its run, launched anyway, names the file.
        assert json.loads(tick.cursor)["acme__data-missing"]["state"] == "waiting"
        assert (set(queued) - {"initech__good-v1", "initech__v1"}) == {
            f"acme__{job}" for job in CASES if job not in ("data-dir-symlink", "data-missing")}
        for job, (_, _, expected) in CASES.items():
            if job == "data-dir-symlink":
                assert expected in store.read_bytes(results_key("acme", job, "rejected.md")).decode()
                continue
            key = f"acme__{job}"
            result = build_defs(local_resources).resolve_job_def("prepare").execute_in_process(
                instance=instance, partition_key=key, raise_on_error=False)
            run = instance.get_run_by_id(result.run_id)
            assert run.status == DagsterRunStatus.FAILURE, job
            error_class, reason = failure_reason(instance, run)
            assert (error_class, job) == ("user", job), reason
            assert expected in reason, (job, reason)
            assert SECRET not in reason
            assert not result.asset_materializations_for_node("tokenized_dataset"), job

        # The good tenant's job in the same landing zone validates and tokenizes as usual.
        good = materialize([raw_dataset, validated_dataset, tokenized_dataset], partition_key="initech__good-v1",
                           resources=local_resources, instance=instance)
        assert good.success

    artifacts = Path(local_resources["artifacts"].root) / "tenants" / "acme"
    assert not (artifacts / "cache").exists()  # nothing was tokenized
    assert not list(artifacts.rglob("training"))
    assert _tree(world["sentinel"]) == outside and _tree(landing / "tenants/initech/jobs") == {
        **victim, **{k: v for k, v in _tree(landing / "tenants/initech/jobs").items() if k.startswith("good-v1")}}
    for root in (landing / "tenants/acme", artifacts):
        for path in root.rglob("*"):
            if path.is_file() and not path.is_symlink() and path.stat().st_nlink == 1:
                assert SECRET.encode() not in path.read_bytes(), path


def test_a_conversation_the_base_models_template_refuses_is_named_by_line(local_resources, tiny_model, tmp_path):
    """Many hub templates raise on roles that do not alternate; the schema allows two user turns in a row. The
    refusal is the tenant's error, naming the line, before training."""
    import shutil

    from resources import BaseModelsResource

    base = tmp_path / "alternating-model"
    shutil.copytree(tiny_model.path, base)
    template = (base / "chat_template.jinja").read_text()
    guard = ("{% for m in messages %}{% if m['role'] == 'user' and loop.index0 > 0 and "
             "messages[loop.index0 - 1]['role'] == 'user' %}"
             "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
             "{% endif %}{% endfor %}")
    (base / "chat_template.jinja").write_text(guard + template)
    lines = ROWS.splitlines(keepends=True)
    doubled = json.dumps({"messages": [{"role": "user", "content": "Hi."}, {"role": "user", "content": "Hello?"},
                                       {"role": "assistant", "content": "Hello."}]}).encode() + b"\n"
    store = local_resources["landing"].store()
    submit_job(store, "acme", "alt-v1", {"train.jsonl": b"".join(lines[:6]) + doubled + b"".join(lines[6:])},
               _manifest(base_model="acme/alternating"))
    resources = {**local_resources, "base_models": BaseModelsResource(
        cache_dir=local_resources["base_models"].cache_dir, aliases={"acme/alternating": str(base)})}
    with instance_for_test() as instance:
        instance.add_dynamic_partitions("tenant_jobs", ["acme__alt-v1"])
        result = materialize([raw_dataset, validated_dataset, tokenized_dataset], partition_key="acme__alt-v1",
                             resources=resources, instance=instance, raise_on_error=False)
        error_class, reason = failure_reason(instance, instance.get_run_by_id(result.run_id))
    assert error_class == "user"
    assert reason.startswith("train.jsonl line 7, messages: the base model's chat template refuses this "
                             "conversation: Conversation roles must alternate")
