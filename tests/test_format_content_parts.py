"""OpenAI's chat content as a list of parts: text parts are joined (one per line), anything else is refused by
line and field, since the base models read text only."""

import pytest

from tests.helpers.formats import learned_text, tokenized, train_a_few_steps, validate, write_rows


def _row(i: int) -> dict:
    return {"messages": [
        {"role": "system", "content": [{"type": "text", "text": "You are Acme's support assistant."}]},
        {"role": "user", "content": [{"type": "text", "text": f"Order {i} is late."},
                                     {"type": "text", "text": "Where is it?"}]},
        {"role": "assistant", "content": [{"type": "text", "text": f"Order {i} ships tomorrow."}]}]}


ROWS = [_row(i) for i in range(16)]


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_text_parts_are_joined_into_the_message(tmp_path, suffix):
    result = validate(write_rows(tmp_path / f"parts{suffix}", ROWS))
    assert result.check.outcome.passed, result.errors
    assert result.conversations()[4] == [
        {"role": "system", "content": "You are Acme's support assistant."},
        {"role": "user", "content": "Order 4 is late.\nWhere is it?"},
        {"role": "assistant", "content": "Order 4 ships tomorrow."}]


def test_parts_and_strings_mix_in_one_file_and_render_like_strings(tmp_path, tokenizer):
    plain = {"messages": [{"role": "user", "content": "Order 1 is late.\nWhere is it?"},
                          {"role": "assistant", "content": "Order 1 ships tomorrow."}]}
    parts = {"messages": [_row(1)["messages"][1], _row(1)["messages"][2]]}
    result = validate(write_rows(tmp_path / "parts.jsonl", [plain, parts]))
    assert result.check.outcome.passed, result.errors
    a, b = tokenized(tokenizer, result).select("input_ids", "assistant_masks").rows()
    assert a == b
    assert learned_text(tokenizer, *a) == ["Order 1 ships tomorrow.<|end|>"]


def test_content_parts_train(tiny_model, tokenizer, tmp_path):
    train_a_few_steps(tiny_model, tokenizer, validate(write_rows(tmp_path / "parts.jsonl", ROWS)), tmp_path)


@pytest.mark.parametrize("content, error", [
    ([{"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": "https://x/a.png"}}],
     'parts.jsonl line 2, messages[1].content[1].type: "image_url" parts are not supported: the base models are '
     "text-only; keep the text parts only"),
    ([{"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}],
     'parts.jsonl line 2, messages[1].content[0].type: "input_audio" parts are not supported: the base models are '
     "text-only; keep the text parts only"),
    (["just a string"], "parts.jsonl line 2, messages[1].content[0]: expected a content part (an object with "
                        "'type'), got string"),
    ([{"type": "text", "text": 3}], "parts.jsonl line 2, messages[1].content[0].text: expected a string, got int"),
    ([{"text": "no type"}], "parts.jsonl line 2, messages[1].content[0].type: null parts are not supported: the "
                            "base models are text-only; keep the text parts only"),
    ([], "parts.jsonl line 2, messages: 1 message(s) with empty content"),
])
def test_a_part_that_is_not_text_is_named_by_file_line_and_field(tmp_path, content, error):
    bad = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": content},
                        {"role": "assistant", "content": "A cat."}]}
    result = validate(write_rows(tmp_path / "parts.jsonl", [ROWS[0], bad, ROWS[2]]))
    assert result.errors == [error]
