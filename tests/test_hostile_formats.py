"""A hostile tenant against the new formats: JSON inside strings (tool arguments, ShareGPT calls, tools), Parquet
values that are not JSON, keys that read differently on the two paths, column mappings that collide. Every
case ends as a named error, or reads the same on the vectorized and the exact path; nothing raises."""

import datetime
import decimal
import json

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ftpipe.data.columns import ColumnMapping
from ftpipe.data.fast_normalize import normalize_lines_fast
from ftpipe.data.normalize import normalize
from ftpipe.data.read import is_json_array, read_records
from tests.helpers.formats import validate, write_rows

USER = {"role": "user", "content": "hi"}
DEEP = "[" * 5000 + "]" * 5000


def _call(arguments) -> dict:
    return {"messages": [USER, {"role": "assistant", "content": "ok", "tool_calls": [
        {"type": "function", "function": {"name": "f", "arguments": arguments}}]}]}


@pytest.mark.parametrize("row, error", [
    (_call(DEEP), "messages[1].tool_calls[0].function.arguments: not valid JSON: nested too deeply (over 100 levels "
                  "of [ and {)"),
    (_call("1" * 5000), "messages[1].tool_calls[0].function.arguments: not valid JSON: a number with more than "
                        "4,300 digits"),
    (_call('{"a": NaN}'), "messages[1].tool_calls[0].function.arguments: not valid JSON: NaN/Infinity are not JSON "
                          "numbers (found NaN); write null or a string"),
    (_call('{"a": "\\ud800"}'), "messages[1].tool_calls[0].function.arguments.a: not valid JSON: contains an "
                                "unpaired UTF-16 surrogate \\ud800; remove it or fix the text's encoding"),
    ({"messages": [USER, {"role": "assistant", "content": "ok"}], "tools": DEEP},
     "tools: not valid JSON: nested too deeply (over 100 levels of [ and {)"),
    ({"conversations": [{"from": "human", "value": "h"}, {"from": "function_call", "value": DEEP}]},
     "conversations[1].value: a function_call must be the call as JSON: nested too deeply (over 100 levels of [ "
     "and {)"),
    ({"messages": [USER, {"role": "tool", "content": "x", "tool_call_id": 5}, {"role": "assistant", "content": "y"}]},
     "messages[1].tool_call_id: expected a string, got int"),
    ({"conversations": [{"from": "human", "value": "hi", "role": "assistant", "content": "zzz"},
                        {"from": "gpt", "value": "a"}]},
     "conversations[0]: has both 'from' and 'role': give one"),
])
def test_json_inside_a_string_is_held_to_the_record_limits(tmp_path, row, error):
    assert validate(write_rows(tmp_path / "t.jsonl", [row])).errors == [f"t.jsonl line 1, {error}"]


@pytest.mark.parametrize("value, error", [
    (datetime.date(2024, 1, 1), "arguments.x: expected a JSON value, got date"),
    (decimal.Decimal("1.5"), "arguments.x: expected a JSON value, got Decimal"),
    (float("nan"), "arguments.x: nan is not a JSON number"),
])
def test_parquet_arguments_that_are_not_json_are_named(tmp_path, value, error):
    path = tmp_path / "t.parquet"
    pq.write_table(pa.Table.from_pylist([_call({"x": value})]), path)
    assert validate(path).errors == [f"t.parquet line 1, messages[1].tool_calls[0].function.{error}"]


def test_parquet_sharegpt_rows_of_either_key_pair_read_alike(tmp_path):
    """A Parquet column has every key of every turn, null where a turn has none: null is absent."""
    rows = [{"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]},
            {"conversations": [{"role": "user", "content": "q2"}, {"role": "assistant", "content": "a2"}]}]
    result = validate(write_rows(tmp_path / "t.parquet", rows))
    assert result.check.outcome.passed, result.errors
    assert [m["content"] for c in result.conversations() for m in c] == ["q", "a", "q2", "a2"]


@pytest.mark.parametrize("bad", [
    '{"prompt": "p", "compl\\u0065tion": 5}',  # an escaped letter in a key: polars would read 5 as "5"
    '{"prompt": "p", "prompt": "q", "completion": "c"}',  # a repeated key: polars keeps the first, json the last
    '{"messages": [{"role": "user", "role": "assistant", "content": "A"}, {"role": "assistant", "content": "B"}]}',
    '{"prompt": "\\u001f", "completion": "c"}',  # whitespace to str.strip() but not to polars' default
    '{"conversations": [{"from": "human", "v\\u0061lue": 3}, {"from": "gpt", "value": "a"}]}',
])
def test_the_vectorized_path_never_reads_a_line_differently(tmp_path, bad):
    clean = '{"prompt": "p", "completion": "c"}' if "messages" not in bad and "conversations" not in bad else \
        json.dumps({"conversations" if "conversations" in bad else "messages": [
            {"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]})
    path = tmp_path / "t.jsonl"
    path.write_text(f"{clean}\n{bad}\n")
    fast = normalize_lines_fast(pl.Series([clean, bad]), 1, "t.jsonl")
    exact = normalize(read_records(path))
    assert fast is None or fast.equals(exact)
    assert not validate(path).check.outcome.passed


def test_a_mapped_csv_column_named_messages_is_not_parsed_as_json(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("messages,completion\nhello there,C\nhow are you,D\n")
    result = validate(path, mapping=ColumnMapping({"prompt": "messages"}))
    assert result.check.outcome.passed, result.errors
    assert result.conversations()[0][0] == {"role": "user", "content": "hello there"}


def test_an_odd_tenant_key_is_quoted_in_the_error_and_not_split_on_its_colon(tmp_path):
    row = {"chat: log": [USER, {"role": "assistant", "content": 5}]}
    result = validate(write_rows(tmp_path / "t.jsonl", [row]), mapping=ColumnMapping({"messages": "chat: log"}))
    assert [(e.field, e.message) for e in result.check.outcome.errors] == [
        ('["chat: log"][1].content', "expected a string, got int")]


def test_a_message_with_both_the_mapped_key_and_ours_is_not_read_silently(tmp_path):
    row = {"messages": [{"role": "user", "utterance": "A", "content": "B"}, {"role": "assistant", "utterance": "Y"}]}
    result = validate(write_rows(tmp_path / "t.jsonl", [row]), mapping=ColumnMapping({"content": "utterance"}))
    assert not result.check.outcome.passed


def test_a_json_array_after_long_whitespace_is_still_an_array(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(" " * 200_000 + json.dumps([{"prompt": "p", "completion": "c"}]))
    assert is_json_array(path)
    assert validate(path).check.outcome.passed


def test_a_huge_number_in_an_array_is_one_records_error(tmp_path):
    path = tmp_path / "t.json"
    path.write_text('[{"prompt": "p", "completion": "c", "id": ' + "9" * 5000
                    + '},\n{"prompt": "q", "completion": "d"}]')
    assert validate(path).errors == ["t.json line 1, record: invalid JSON: a number with more than 4,300 digits"]
