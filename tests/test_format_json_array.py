"""A ``.json`` file holding one JSON array of records, as Alpaca's ``alpaca_data.json`` and LLaMA-Factory's data
files are written (pretty-printed): read element by element in bounded memory, each record named by the line
it starts on. A ``.json`` file of JSON Lines is still read as lines."""

import json

import pytest

from ftpipe.data.read import json_array_records
from tests.helpers.formats import validate

ALPACA = [{"instruction": f"Give the return window for product {i}.", "input": "", "output": f"{10 + i} days."}
          for i in range(40)]


def _records(tmp_path, content: str | bytes, chunk_bytes: int = 64):
    path = tmp_path / "data.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return [(r.line, r.error, r.field, r.data) for batch in json_array_records(path, "data.json", chunk_bytes)
            for r in batch]


def test_a_pretty_printed_array_reads_every_record_at_the_line_it_starts_on(tmp_path):
    rows = [{**r, "input": "x" * (i * 7)} for i, r in enumerate(ALPACA)]
    text = json.dumps(rows, indent=4)
    starts = [i + 1 for i, line in enumerate(text.split("\n")) if line.strip() == "{"]
    for chunk_bytes in (17, 50, 1 << 20):  # records cut across blocks anywhere, and one block for all
        records = _records(tmp_path, text, chunk_bytes)
        assert [r[0] for r in records] == starts
        assert [r[3] for r in records] == rows


def test_alpaca_data_json_validates_as_alpaca(tmp_path):
    path = tmp_path / "alpaca_data.json"
    path.write_text(json.dumps(ALPACA, indent=4))
    result = validate(path)
    assert result.check.outcome.passed, result.errors
    assert result.check.stats["shapes"] == "alpaca" and result.check.outcome.n_examples == 40


def test_a_bad_record_in_an_array_is_named_by_the_line_it_starts_on(tmp_path):
    rows = [*ALPACA[:3], {"instruction": "Summarise.", "output": 7}, *ALPACA[3:6]]
    path = tmp_path / "alpaca_data.json"
    path.write_text(json.dumps(rows, indent=2))
    assert validate(path).errors == ["alpaca_data.json line 17, output: expected a string, got int"]


def test_a_json_file_of_json_lines_is_read_as_lines(tmp_path):
    path = tmp_path / "data.json"
    path.write_text("".join(json.dumps(r) + "\n" for r in ALPACA))
    result = validate(path)
    assert result.check.outcome.passed, result.errors and result.check.outcome.n_examples == 40


STOPPED = "; the rest of the file was not read (fix it and upload again)"


@pytest.mark.parametrize("content, expected", [
    ('[{"a": 1}, {"a": NaN}, {"a": 2}]', [(1, None), (1, "invalid JSON: NaN/Infinity are not JSON numbers (found "
                                                         "NaN); write null or a string"), (1, None)]),
    ('[{"a": 1e999}]', [(1, "invalid JSON: the number 1e999 is too large for a 64-bit float")]),
    ('[1, {"a": 1}]', [(1, "expected a JSON object, got int"), (1, None)]),
    ('[{"a": "\\ud800"}]', [(1, "contains an unpaired UTF-16 surrogate \\ud800; remove it or fix the text's "
                                "encoding")]),
    ('[{"a": 1},\n{"a": tru}]', [(1, None), (2, "invalid JSON: Expecting value (line 2)" + STOPPED)]),
    ('[{"a": 1},\n {"a": ' + "[" * 5000 + "]" * 5000 + "}, {\"a\": 2}]",
     [(1, None), (2, "invalid JSON: nested too deeply (over 100 levels of [ and {)"), (2, None)]),
    ('[{"a": 1}', [(1, None), (1, "the JSON array is not closed with ]" + STOPPED)]),
    ('[{"a": 1}] trailing', [(1, None), (1, "unexpected text after the JSON array's closing ]" + STOPPED)]),
    ('[{"a": 1} {"a": 2}]', [(1, None), (1, "expected ',' or ']' between records, found '{'" + STOPPED)]),
    (b'[{"a": "\xff"}]', [(1, "not UTF-8: re-save the file as UTF-8" + STOPPED)]),
    ("[]", []),
    (b'\xef\xbb\xbf[{"a": 1}]', [(1, None)]),
])
def test_hostile_arrays_end_as_named_errors(tmp_path, content, expected):
    assert [(line, error) for line, error, _, _ in _records(tmp_path, content, chunk_bytes=8)] == expected


@pytest.mark.parametrize("chunk_bytes", [1 << 16, 1 << 20, 8 << 20])
def test_an_element_over_the_record_limit_is_its_own_error_and_reading_goes_on(tmp_path, chunk_bytes):
    """Found by counting brackets, never held whole, wherever the blocks cut it (a string with brackets and
    escaped quotes in it too)."""
    content = '[{"a": 1},\n{"a": "' + 'y[\\"}' * (1 << 19) + '"},\n{"a": 2}]'
    assert [(line, error) for line, error, _, _ in _records(tmp_path, content, chunk_bytes)] == [
        (1, None), (2, "record is 2,621,449 bytes, over the 1 MiB limit for one record; split or shorten it"),
        (3, None)]
