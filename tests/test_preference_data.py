"""Preference pairs for DPO in every shape tenants bring, normalized to one form, with errors that name the field."""

import json

import pytest

from ftpipe.data.pipeline import check_examples, load_examples

PROMPT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Return window for the lamp?"}]
GOOD, BAD = "14 days.", "90 days."

SHAPES = {
    "strings": {"system": "Be brief.", "prompt": "Return window for the lamp?", "chosen": GOOD, "rejected": BAD},
    "conversations": {"prompt": PROMPT, "chosen": [{"role": "assistant", "content": GOOD}],
                      "rejected": [{"role": "assistant", "content": BAD}]},
    "hosted_api": {"input": {"messages": PROMPT, "tools": []},
                   "preferred_output": [{"role": "assistant", "content": GOOD}],
                   "non_preferred_output": [{"role": "assistant", "content": BAD}]},
}


def _load(tmp_path, rows: list[dict], objective="dpo", min_examples=1):
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    examples = load_examples({"train": path}, holdout_fraction=0.1)
    return examples, check_examples(examples, min_examples, None, objective)


@pytest.mark.parametrize("shape", SHAPES)
def test_every_preference_shape_normalizes_to_the_same_pair(tmp_path, shape):
    examples, check = _load(tmp_path, [SHAPES[shape]] * 3)
    assert check.outcome.passed, check.outcome.error_lines()
    row = examples.row(0, named=True)
    assert json.loads(row["messages"]) == PROMPT + [{"role": "assistant", "content": GOOD}]
    assert row["n_prompt"] == 2 and json.loads(row["rejected"]) == [{"role": "assistant", "content": BAD}]


@pytest.mark.parametrize("row, expected", [
    ({**SHAPES["strings"], "rejected": GOOD}, "pairs.jsonl line 2, rejected: identical to chosen (nothing to prefer)"),
    ({**SHAPES["hosted_api"], "non_preferred_output": []}, "pairs.jsonl line 2, non_preferred_output: empty"),
    ({**SHAPES["conversations"], "chosen": [{"role": "user", "content": GOOD}]},
     "pairs.jsonl line 2, chosen: must hold assistant message(s) only"),
    ({**SHAPES["strings"], "chosen": 14}, "pairs.jsonl line 2, record: field 'chosen' must be a string or a list"),
    ({**SHAPES["hosted_api"], "input": "Return window?"},
     "pairs.jsonl line 2, record: field 'input' must be an object"),
])
def test_a_broken_pair_is_named_by_line_and_field(tmp_path, row, expected):
    shape_of_file = SHAPES["hosted_api"] if "input" in row else SHAPES["strings"] if isinstance(
        row.get("prompt"), str) else SHAPES["conversations"]
    _, check = _load(tmp_path, [shape_of_file, row, shape_of_file])
    assert not check.outcome.passed
    assert check.outcome.error_lines()[0].startswith(expected)


def test_the_objective_must_match_the_data(tmp_path):
    chat = {"messages": PROMPT + [{"role": "assistant", "content": GOOD}]}
    _, check = _load(tmp_path, [chat] * 3, objective="dpo")
    assert check.outcome.dataset_errors == [
        "objective 'dpo' trains on preference pairs (prompt/chosen/rejected or input/preferred_output/"
        "non_preferred_output), but pairs.jsonl line 1 is a 'chat' example"]
    _, check = _load(tmp_path, [SHAPES["strings"]] * 3, objective="sft")
    assert "set 'objective: dpo' in manifest.yaml" in check.outcome.dataset_errors[0]
