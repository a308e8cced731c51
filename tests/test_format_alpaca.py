"""Alpaca as the original dataset and LLaMA-Factory write it: ``instruction`` / ``input`` / ``output`` (``response``
too), optional ``system`` and ``history``; in JSONL, CSV and Parquet."""

import pytest

from tests.helpers.formats import learned_text, tokenized, train_a_few_steps, validate, write_rows

ROWS = [{"instruction": f"Give the return window for product {i}.", "input": f"Product {i} is a kettle." if i % 2
         else "", "output": f"Product {i} can be returned within {10 + i} days."} for i in range(16)]


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
def test_alpaca_rows_become_one_user_turn_and_one_answer(tmp_path, suffix):
    result = validate(write_rows(tmp_path / f"alpaca{suffix}", ROWS))
    assert result.check.outcome.passed, result.errors
    assert result.check.stats["shapes"] == "alpaca"
    assert result.conversations()[1] == [
        {"role": "user", "content": "Give the return window for product 1.\n\nProduct 1 is a kettle."},
        {"role": "assistant", "content": "Product 1 can be returned within 11 days."}]
    assert result.conversations()[0][0]["content"] == "Give the return window for product 0."  # empty input


def test_system_and_history_come_before_the_instruction_and_only_answers_are_learned(tmp_path, tokenizer):
    row = {"system": "Answer briefly.", "instruction": "And the warranty?", "input": "", "output": "Two years.",
           "history": [["Which kettle is this?", "The K-1."], ["Return window?", "30 days."]]}
    result = validate(write_rows(tmp_path / "alpaca.jsonl", [row]))
    assert result.check.outcome.passed, result.errors
    assert [m["role"] for m in result.conversations()[0]] == ["system", "user", "assistant", "user", "assistant",
                                                              "user", "assistant"]
    ids, mask = tokenized(tokenizer, result).select("input_ids", "assistant_masks").row(0)
    assert learned_text(tokenizer, ids, mask) == ["The K-1.<|end|>", "30 days.<|end|>", "Two years.<|end|>"]


def test_alpaca_trains(tiny_model, tokenizer, tmp_path):
    train_a_few_steps(tiny_model, tokenizer, validate(write_rows(tmp_path / "alpaca.jsonl", ROWS)), tmp_path)


@pytest.mark.parametrize("bad, error", [
    ({"instruction": "Summarise.", "input": "Text.", "outptu": "Short."},
     "alpaca.jsonl line 2, record: unrecognized shape with keys ['input', 'instruction', 'outptu']: the 'alpaca' "
     "shape (instruction+output) lacks 'output' (is \"outptu\" it? then rename it, or map it in the manifest's "
     "columns:)"),
    ({"instruction": "Summarise.", "output": 42}, "alpaca.jsonl line 2, output: expected a string, got int"),
    ({"instruction": "Summarise.", "output": "Short.", "input": ["a"]},
     "alpaca.jsonl line 2, input: expected a string, got list"),
    ({"instruction": "Summarise.", "output": "Short.", "history": [["only the question"]]},
     "alpaca.jsonl line 2, history[0]: expected an [instruction, response] pair, got [\"only the question\"]"),
    ({"instruction": "Summarise.", "output": "Short.", "history": [["q", None]]},
     "alpaca.jsonl line 2, history[0][1]: expected a string, got null"),
    ({"instruction": "Summarise.", "output": "   "}, "alpaca.jsonl line 2, messages: 1 message(s) with empty content"),
    ({"instruction": "Summarise.", "output": "Short.", "source": "web"},
     "alpaca.jsonl line 2, record: unknown keys: source"),
    ({"instruction": "Summarise.", "response": "Short."},
     "alpaca.jsonl line 2, record: shape 'instruction' differs from the file's first example (alpaca); one shape "
     "per file"),
])
def test_a_broken_alpaca_row_is_named_by_file_line_and_field(tmp_path, bad, error):
    result = validate(write_rows(tmp_path / "alpaca.jsonl", [ROWS[0], bad, ROWS[2]]))
    assert result.errors == [error]
