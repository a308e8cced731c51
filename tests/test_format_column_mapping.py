"""The manifest's ``columns:`` and ``roles:``: a file with its own key and role names trains without being
rewritten; the mapping is checked at admission, and errors name the tenant's own keys."""

import json

import pytest
from dagster import instance_for_test, materialize

from ft_assets.datasets import raw_dataset, tokenized_dataset, validated_dataset
from ftpipe import synthetic
from ftpipe.data.columns import ColumnMapping
from ftpipe.landing import results_key
from ftpipe.manifest import ManifestError, parse_manifest
from ftpipe.submission import default_manifest, submit_job
from tests.helpers.formats import validate, write_rows

MAPPING = ColumnMapping({"messages": "dialogue", "role": "speaker", "content": "utterance"},
                        {"customer": "user", "bot": "assistant"})


def _dialogue(conversation: list[dict]) -> dict:
    names = {"user": "customer", "assistant": "bot", "system": "system"}
    return {"dialogue": [{"speaker": names[m["role"]], "utterance": m["content"]} for m in conversation]}


ROWS = [_dialogue(c) for c in synthetic.acme_support(30)]


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
def test_a_mapped_file_reads_as_the_chat_it_is(tmp_path, suffix):
    result = validate(write_rows(tmp_path / f"dialogue{suffix}", ROWS), mapping=MAPPING)
    assert result.check.outcome.passed, result.errors
    assert result.conversations() == synthetic.acme_support(30)


def test_without_the_mapping_the_file_is_refused(tmp_path):
    result = validate(write_rows(tmp_path / "dialogue.jsonl", ROWS[:1]))
    assert result.errors == ["dialogue.jsonl line 1, record: unrecognized shape with keys ['dialogue']: expected one "
                             "of messages; conversations; completion+prompt; instruction+response; "
                             "instruction+output; text; chosen+prompt+rejected; "
                             "input+non_preferred_output+preferred_output"]


def test_errors_name_the_tenants_own_keys(tmp_path):
    bad = {"dialogue": [{"speaker": "customer", "utterance": "Hi"}, {"speaker": "robot", "utterance": "Hello."}]}
    wrong_type = {"dialogue": [{"speaker": "customer", "utterance": 5}, {"speaker": "bot", "utterance": "Hello."}]}
    extra = {**ROWS[0], "messages": []}
    result = validate(write_rows(tmp_path / "dialogue.jsonl", [ROWS[0], bad, wrong_type, extra]), mapping=MAPPING)
    assert result.errors == [
        'dialogue.jsonl line 2, dialogue[1].speaker: unknown role "robot" (allowed: system, user, assistant, tool, '
        "customer, bot); did you mean \"bot\"? (or map it in the manifest's roles:)",
        "dialogue.jsonl line 3, dialogue[0].utterance: expected a string, got int",
        "dialogue.jsonl line 4, record: unknown keys: 'messages' (besides the mapped one)"]


def test_alpaca_keys_of_another_tool_map_too(tmp_path):
    rows = [{"question": f"Return window for item {i}?", "answer": f"{i + 10} days."} for i in range(5)]
    mapping = ColumnMapping({"prompt": "question", "completion": "answer"})
    result = validate(write_rows(tmp_path / "qa.csv", rows), mapping=mapping)
    assert result.check.outcome.passed, result.errors
    assert result.conversations()[2] == [{"role": "user", "content": "Return window for item 2?"},
                                         {"role": "assistant", "content": "12 days."}]


@pytest.mark.parametrize("manifest, error", [
    ("columns: {mesages: dialogue}", "field 'columns': unknown field 'mesages'; map one of messages, conversations"),
    ("columns: {messages: x, text: x}", "field 'columns': the key 'x' is mapped to more than one field"),
    ("columns: {messages: ''}", "field 'columns': 'messages': expected the key name in your file"),
    ("columns: {messages: [a, b]}", "field 'columns.messages': Input should be a valid string"),
    ("roles: {bot: robot}", "field 'roles': 'bot': 'robot' is not one of system, user, assistant, tool"),
    ("roles: [bot]", "field 'roles': Input should be a valid dictionary"),
])
def test_a_bad_mapping_is_refused_at_admission_naming_the_field(manifest, error):
    with pytest.raises(ManifestError, match=f"^manifest.yaml: {error}".replace("[", r"\[").replace("(", r"\(")):
        parse_manifest(f"base_model: ftpipe/tiny-llama\ndataset: t.jsonl\n{manifest}\n")


def test_the_assets_read_through_the_mapping_and_cache_per_mapping(local_resources, tiny_model):
    store = local_resources["landing"].store()
    data = "".join(json.dumps(_dialogue(c)) + "\n" for c in synthetic.acme_support(150)).encode()
    mapped = default_manifest("t.jsonl", min_examples=20, columns=MAPPING.columns, roles=MAPPING.roles)
    # The same upload under another roles: mapping (a customer's turns taken as the system's) is another dataset.
    remapped = {**mapped, "roles": {**MAPPING.roles, "customer": "system"}}
    submit_job(store, "acme", "mapped", {"t.jsonl": data}, mapped)
    submit_job(store, "acme", "remapped", {"t.jsonl": data}, remapped)
    with instance_for_test() as instance:
        instance.add_dynamic_partitions("tenant_jobs", ["acme__mapped", "acme__remapped"])
        ok = materialize([raw_dataset, validated_dataset, tokenized_dataset], partition_key="acme__mapped",
                         resources=local_resources, instance=instance)
        refused = materialize([raw_dataset, validated_dataset, tokenized_dataset], partition_key="acme__remapped",
                              resources=local_resources, instance=instance, raise_on_error=False)
    assert ok.success
    assert ok.asset_materializations_for_node("tokenized_dataset")[0].metadata["cache_hit"].value is False
    assert not refused.success
    report = json.loads(store.read_bytes(results_key("acme", "remapped", "validation.json")))
    first = report["errors"][0]
    assert (first["source_file"], first["line"], first["field"]) == ("t.jsonl", 1, "messages[].role")
    assert first["message"].startswith("roles out of order")


def _preference_rows(n: int) -> list[dict]:
    return [{"prompt": f"Return window for item {i}?", "chosen": f"{i + 10} days.", "rejected": "Forever."}
            for i in range(n)]


@pytest.mark.parametrize("rows, shape, objective", [
    (_preference_rows(100), "preference", "dpo"),
    ([{"input": {"messages": [{"role": "user", "content": r["prompt"]}]},
       "preferred_output": [{"role": "assistant", "content": r["chosen"]}],
       "non_preferred_output": [{"role": "assistant", "content": r["rejected"]}]} for r in _preference_rows(100)],
     "preference_api", "dpo"),
    ([{"conversations": [{"from": "human", "value": f"Hi {i}"}, {"from": "gpt", "value": f"Hello {i}."}]}
      for i in range(100)], "sharegpt", "sft"),
])
def test_ftpipe_validate_infers_the_objective_from_the_shape_and_says_so(tmp_path, monkeypatch, capsys, tiny_model,
                                                                         rows, shape, objective):
    from ftpipe_cli.main import main

    monkeypatch.setenv("FTPIPE_HOME", str(tmp_path / "home"))
    path = write_rows(tmp_path / "data.jsonl", rows)
    assert main(["validate", str(path), "--min-examples", "10"]) == 0
    out, err = capsys.readouterr()
    assert f"objective: {objective} (inferred from the shape of its first example ('{shape}')" in err
    assert "Validation passed" in out


def test_ftpipe_validate_reads_the_manifests_mapping(tmp_path, monkeypatch, capsys, tiny_model):
    from ftpipe_cli.main import main

    monkeypatch.setenv("FTPIPE_HOME", str(tmp_path / "home"))
    path = write_rows(tmp_path / "data.jsonl", [_dialogue(c) for c in synthetic.acme_support(150)])
    manifest = tmp_path / "manifest.yaml"
    manifest.write_text("base_model: ftpipe/tiny-llama\ndataset: data.jsonl\nobjective: sft\n"
                        "columns: {messages: dialogue, role: speaker, content: utterance}\n"
                        "roles: {customer: user, bot: assistant}\n")
    assert main(["validate", str(path), "--min-examples", "10"]) == 1
    assert "unrecognized shape with keys ['dialogue']" in capsys.readouterr().out
    assert main(["validate", str(path), "--min-examples", "10", "--manifest", str(manifest)]) == 0
    out, err = capsys.readouterr()
    assert "inferred" not in err  # the manifest sets the objective
