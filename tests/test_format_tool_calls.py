"""OpenAI's tool use: an example's ``tools``, assistant ``tool_calls`` (arguments a JSON string) and the ``tool``
messages answering them, rendered through the base model's chat template; the calls are learned, the tools'
answers are not. A template that cannot show tools is refused before any training."""

import json

import polars as pl
import pytest

from ftpipe.basemodel.chat_template import CHAT_TEMPLATE
from ftpipe.data.pipeline import TemplateRefused, tokenize_to_parquet
from ftpipe.data.tokenize import renders_tools
from tests.helpers.formats import learned_text, tokenized, train_a_few_steps, validate, write_rows

TOOLS = [{"type": "function", "function": {
    "name": "get_order", "description": "Look up an order",
    "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}}}]


def _row(i: int) -> dict:
    return {"tools": TOOLS, "messages": [
        {"role": "user", "content": f"Where is order A-{i}?"},
        {"role": "assistant", "tool_calls": [{"id": f"call_{i}", "type": "function", "function": {
            "name": "get_order", "arguments": json.dumps({"order_id": f"A-{i}"})}}]},
        {"role": "tool", "tool_call_id": f"call_{i}", "content": json.dumps({"status": "shipped", "days": i % 4})},
        {"role": "assistant", "content": f"Order A-{i} has shipped."}]}


ROWS = [_row(i) for i in range(16)]
# The template as it was before it rendered tools: a common case among base models.
WITHOUT_TOOLS = ("{{ bos_token }}{% for message in messages %}{% if message['role'] == 'assistant' %}<|assistant|>\n"
                 "{% generation %}{{ message['content'] }}<|end|>{% endgeneration %}\n{% else %}"
                 "<|{{ message['role'] }}|>\n{{ message['content'] }}<|end|>\n{% endif %}{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_tool_calls_are_normalized_with_their_arguments_as_an_object(tmp_path, suffix):
    result = validate(write_rows(tmp_path / f"tools{suffix}", ROWS))
    assert result.check.outcome.passed, result.errors
    assert result.conversations()[2][1] == {"role": "assistant", "content": None, "tool_calls": [
        {"type": "function", "function": {"name": "get_order", "arguments": {"order_id": "A-2"}}, "id": "call_2"}]}
    assert result.conversations()[2][2]["tool_call_id"] == "call_2"
    assert result.tools()[2][0]["function"]["name"] == "get_order"


def test_only_the_calls_and_the_answers_are_learned_and_the_tools_are_shown(tmp_path, tokenizer):
    ids, mask = tokenized(tokenizer, validate(write_rows(tmp_path / "tools.jsonl", ROWS[:3]))
                          ).select("input_ids", "assistant_masks").row(1)
    assert learned_text(tokenizer, ids, mask) == [
        '<tool_call>{"name": "get_order", "arguments": {"order_id": "A-1"}}</tool_call><|end|>',
        "Order A-1 has shipped.<|end|>"]
    text = tokenizer.decode(ids)
    assert text.startswith('<s><|system|>\nTools:\n{"type": "function", "function": {"name": "get_order"')
    assert '<|tool|>\n{"status": "shipped", "days": 1}<|end|>' in text


def test_a_conversation_without_tools_renders_as_before_tools_were_supported(tokenizer):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello."}]
    assert tokenizer.chat_template == CHAT_TEMPLATE
    assert tokenizer.apply_chat_template(messages, tokenize=False) == \
        tokenizer.apply_chat_template(messages, tokenize=False, chat_template=WITHOUT_TOOLS)


def test_a_template_that_cannot_show_tools_is_refused_naming_the_first_example(tmp_path, tokenizer):
    from transformers import AutoTokenizer

    plain = AutoTokenizer.from_pretrained(tokenizer.name_or_path)
    plain.chat_template = WITHOUT_TOOLS
    assert renders_tools(tokenizer) and not renders_tools(plain)
    result = validate(write_rows(tmp_path / "tools.jsonl", [{"messages": [
        {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]}, *ROWS[:2]]))
    with pytest.raises(TemplateRefused, match=r"^tools.jsonl line 2, tools: the base model's chat template does not "
                                              r"render tools and tool calls"):
        tokenize_to_parquet(plain, result.examples_file, tmp_path / "out.parquet", 512, "sft")
    assert not (tmp_path / "out.parquet").exists()


def test_tool_calls_train(tiny_model, tokenizer, tmp_path):
    train_a_few_steps(tiny_model, tokenizer, validate(write_rows(tmp_path / "tools.jsonl", ROWS)), tmp_path)


def _with(message: dict | None = None, tools=TOOLS) -> dict:
    row = _row(1)
    if message is not None:
        row["messages"][1] = message
    if tools is None:
        del row["tools"]
    else:
        row["tools"] = tools
    return row


def _call(arguments, name: str = "get_order") -> dict:
    return {"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
                                                 "function": {"name": name, "arguments": arguments}}]}


@pytest.mark.parametrize("row, error", [
    (_with(_call('{"order_id": "A-1"')), "tools.jsonl line 2, messages[1].tool_calls[0].function.arguments: not valid "
                                         "JSON: Expecting ',' delimiter at column 19"),
    (_with(_call('"A-1"')), "tools.jsonl line 2, messages[1].tool_calls[0].function.arguments: expected a JSON "
                            "object of arguments, got string"),
    (_with(_call("{}", name="delete_everything")), "tools.jsonl line 2, messages[1].tool_calls[0].function.name: "
                                                   "\"delete_everything\" is not among the example's tools "
                                                   "(get_order)"),
    (_with(_call("{}", name="")), "tools.jsonl line 2, messages[1].tool_calls[0].function.name: expected the "
                                  "function's name, got \"\""),
    (_with({"role": "user", "content": "x", "tool_calls": _call("{}")["tool_calls"]}),
     "tools.jsonl line 2, messages[1].tool_calls: only assistant messages make tool calls, not \"user\""),
    (_with({"role": "assistant", "tool_calls": []}), "tools.jsonl line 2, messages[1].tool_calls: empty list of "
                                                     "tool calls"),
    (_with({"role": "assistant", "tool_calls": [{"type": "retrieval"}]}),
     "tools.jsonl line 2, messages[1].tool_calls[0].type: \"retrieval\" tool calls are not supported (only "
     "'function')"),
    (_with(tools={"get_order": {}}), "tools.jsonl line 2, tools: expected a list of tools, got object"),
    (_with(tools=[{"type": "function", "function": {"name": "get_order", "parameters": "any"}}]),
     "tools.jsonl line 2, tools[0].function.parameters: expected a JSON schema object, got string"),
    (_with(tools=[{"type": "function", "function": {"description": "no name"}}]),
     "tools.jsonl line 2, tools[0].function.name: expected the function's name, got null"),
])
def test_a_broken_tool_call_is_named_by_file_line_and_field(tmp_path, row, error):
    result = validate(write_rows(tmp_path / "tools.jsonl", [ROWS[0], row, ROWS[2]]))
    assert result.errors == [error]


def test_a_call_without_a_tools_list_is_taken_as_written(tmp_path):
    result = validate(write_rows(tmp_path / "tools.jsonl", [_with(tools=None)]))
    assert result.check.outcome.passed, result.errors
    assert result.tools() == [None]


def test_tool_rows_take_the_exact_path_and_agree_with_it(tmp_path):
    """The vectorized path reads role and content only: rows with tools or calls must not lose them there."""
    from ftpipe.data.fast_normalize import normalize_lines_fast

    lines = pl.Series([json.dumps(r) for r in ROWS[:3]])
    assert normalize_lines_fast(lines, 1, "tools.jsonl") is None


def test_openais_older_functions_format_reads_as_tools(tmp_path, tokenizer):
    row = {"functions": [TOOLS[0]["function"]], "messages": [
        {"role": "user", "content": "Where is order A-7?"},
        {"role": "assistant", "content": None, "function_call": {"name": "get_order",
                                                                 "arguments": '{"order_id": "A-7"}'}},
        {"role": "function", "name": "get_order", "content": '{"status": "shipped"}'},
        {"role": "assistant", "content": "Order A-7 has shipped."}]}
    result = validate(write_rows(tmp_path / "functions.jsonl", [row]))
    assert result.check.outcome.passed, result.errors
    assert [m["role"] for m in result.conversations()[0]] == ["user", "assistant", "tool", "assistant"]
    assert result.tools() == [[TOOLS[0]]]
    ids, mask = tokenized(tokenizer, result).select("input_ids", "assistant_masks").row(0)
    assert learned_text(tokenizer, ids, mask)[0] == \
        '<tool_call>{"name": "get_order", "arguments": {"order_id": "A-7"}}</tool_call><|end|>'


def test_a_row_with_a_tools_list_but_no_call_keeps_its_tools_on_the_vectorized_path(tmp_path):
    rows = [{"tools": TOOLS, "messages": [{"role": "user", "content": f"Hi {i}"},
                                          {"role": "assistant", "content": "Hello."}]} for i in range(3)]
    result = validate(write_rows(tmp_path / "tools.jsonl", rows))
    assert result.tools() == [TOOLS] * 3
