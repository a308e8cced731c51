"""ShareGPT as LLaMA-Factory and FastChat write it: ``conversations`` of ``{"from", "value"}`` turns (human, gpt,
system, function_call, observation) or of ``{"role", "content"}``, an optional ``system`` and ``tools``."""

import json

import pytest

from tests.helpers.formats import learned_text, tokenized, train_a_few_steps, validate, write_rows


def _conversation(i: int) -> list[dict]:
    return [{"from": "human", "value": f"Where is order {i}?"}, {"from": "gpt", "value": f"Order {i} shipped."},
            {"from": "human", "value": "When will it arrive?"}, {"from": "gpt", "value": f"In {i % 5 + 1} days."}]


ROWS = [{"conversations": _conversation(i)} for i in range(16)]


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
def test_sharegpt_turns_map_onto_chat_roles(tmp_path, suffix):
    result = validate(write_rows(tmp_path / f"sharegpt{suffix}", ROWS))
    assert result.check.outcome.passed, result.errors
    assert result.check.stats["shapes"] == "sharegpt"
    assert result.conversations()[3] == [
        {"role": "user", "content": "Where is order 3?"}, {"role": "assistant", "content": "Order 3 shipped."},
        {"role": "user", "content": "When will it arrive?"}, {"role": "assistant", "content": "In 4 days."}]


def test_the_role_content_variant_and_a_system_key(tmp_path):
    row = {"system": "Be brief.", "conversations": [{"role": "user", "content": "Hi"},
                                                    {"role": "assistant", "content": "Hello."}]}
    result = validate(write_rows(tmp_path / "sharegpt.jsonl", [row]))
    assert result.check.outcome.passed, result.errors
    assert result.conversations()[0] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                                         {"role": "assistant", "content": "Hello."}]


def test_in_a_multi_turn_conversation_only_the_gpt_turns_are_learned(tmp_path, tokenizer):
    result = validate(write_rows(tmp_path / "sharegpt.jsonl", ROWS[:2]))
    ids, mask = tokenized(tokenizer, result).select("input_ids", "assistant_masks").row(1)
    assert learned_text(tokenizer, ids, mask) == ["Order 1 shipped.<|end|>", "In 2 days.<|end|>"]
    assert tokenizer.decode(ids).count("<|user|>") == 2


def test_function_call_and_observation_turns_become_a_tool_call_and_its_answer(tmp_path, tokenizer):
    row = {"conversations": [
        {"from": "human", "value": "Weather in Paris?"},
        {"from": "function_call", "value": json.dumps({"name": "get_weather", "arguments": {"city": "Paris"}})},
        {"from": "observation", "value": "18C, sunny"},
        {"from": "gpt", "value": "It is 18C and sunny."}],
        "tools": json.dumps([{"name": "get_weather", "description": "Weather by city",
                              "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}])}
    result = validate(write_rows(tmp_path / "sharegpt.jsonl", [row]))
    assert result.check.outcome.passed, result.errors
    assert result.conversations()[0][1] == {"role": "assistant", "content": None, "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]}
    assert result.tools()[0][0]["function"]["name"] == "get_weather"
    ids, mask = tokenized(tokenizer, result).select("input_ids", "assistant_masks").row(0)
    assert learned_text(tokenizer, ids, mask) == [
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call><|end|>',
        "It is 18C and sunny.<|end|>"]
    assert "18C, sunny" in tokenizer.decode(ids)  # the observation is context, not learned


def test_sharegpt_trains(tiny_model, tokenizer, tmp_path):
    train_a_few_steps(tiny_model, tokenizer, validate(write_rows(tmp_path / "sharegpt.jsonl", ROWS)), tmp_path)


@pytest.mark.parametrize("turn, error", [
    ({"from": "bot", "value": "Hello."},
     'sharegpt.jsonl line 2, conversations[1].from: unknown role "bot" (allowed: human, user, gpt, assistant, system, '
     'observation, function, tool, function_call); did you mean "assistant"? (or map it in the manifest\'s roles:)'),
    ({"from": "gpt", "value": 7}, "sharegpt.jsonl line 2, conversations[1].value: expected a string, got int"),
    ({"from": "function_call", "value": "{not json"},
     "sharegpt.jsonl line 2, conversations[1].value: a function_call must be the call as JSON: Expecting property "
     "name enclosed in double quotes at column 2"),
    ({"from": "function_call", "value": json.dumps({"name": "f", "arguments": "[1]"})},
     "sharegpt.jsonl line 2, conversations[1].value.arguments: expected a JSON object of arguments, got list"),
    ({"value": "Hello."}, "sharegpt.jsonl line 2, conversations[1].from: missing (allowed: human, user, gpt, "
                          "assistant, system, observation, function, tool, function_call)"),
    ({"from": "gpt", "value": ""}, "sharegpt.jsonl line 2, conversations: 1 message(s) with empty content"),
])
def test_a_broken_sharegpt_turn_is_named_by_file_line_and_field(tmp_path, turn, error):
    bad = {"conversations": [{"from": "human", "value": "Hi"}, turn]}
    result = validate(write_rows(tmp_path / "sharegpt.jsonl", [ROWS[0], bad, ROWS[2]]))
    assert result.errors == [error]


def test_conversations_that_are_not_a_list_are_named(tmp_path):
    result = validate(write_rows(tmp_path / "sharegpt.jsonl", [ROWS[0], {"conversations": "Hi"}]))
    assert result.errors == ["sharegpt.jsonl line 2, conversations: expected a list of messages, got string"]


def test_sharegpt_turns_under_a_messages_key_read_as_sharegpt(tmp_path):
    rows = [{"messages": r["conversations"]} for r in ROWS[:3]]
    result = validate(write_rows(tmp_path / "sharegpt.jsonl", rows))
    assert result.check.outcome.passed, result.errors
    assert result.conversations()[1][1] == {"role": "assistant", "content": "Order 1 shipped."}
