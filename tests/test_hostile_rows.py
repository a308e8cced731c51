"""Careless or hostile uploads: no file makes validation raise anything but ``UnsupportedFormat``; every bad row is
a row error that names the file, the 1-based line and the field, and a file that cannot be read at all is one
file-level error that says what to do."""

import bz2
import csv
import datetime
import decimal
import gzip
import io
import json
import lzma
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ftpipe.data import read
from ftpipe.data.fast_normalize import normalize_lines_fast
from ftpipe.data.normalize import normalize
from ftpipe.data.pipeline import normalize_file, validate_to_parquet
from ftpipe.data.read import MAX_NESTING, UnreadableFile, UnsupportedFormat, iter_line_chunks, read_records

CHAT = {"messages": [{"role": "user", "content": "Where is my order?"},
                     {"role": "assistant", "content": "On its way."}]}
PC = {"prompt": "Where is my order?", "completion": "On its way."}
PAIR = {"prompt": "Return window?", "chosen": "14 days.", "rejected": "90 days."}
PARTS = [{"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": "http://169.254.169.254/"}}]
REFUSED_PARTS = '"image_url" parts are not supported: the base models are text-only'



def _jsonl(bad: str | bytes, good: dict = CHAT) -> bytes:
    """A good line, the bad one (line 2), a good line."""
    good_line = json.dumps(good).encode() + b"\n"
    return good_line + (bad if isinstance(bad, bytes) else bad.encode()) + b"\n" + good_line


def _chat_with(first: dict) -> str:
    return json.dumps({"messages": [first, {"role": "assistant", "content": "x"}]})


def _parquet(**columns) -> bytes:
    out = io.BytesIO()
    pq.write_table(pa.table(columns), out)
    return out.getvalue()


def _csv(frame: dict) -> bytes:
    out = io.BytesIO()
    pl.DataFrame(frame).write_csv(out)
    return out.getvalue()


def _messages_column(*messages: list[dict]) -> list[str]:
    return [json.dumps(m) for m in messages]


GOOD_MESSAGES = CHAT["messages"]

# name -> (file name, content, objective, line, field, message prefix)
ROW_CASES = {
    "content parts": ("train.jsonl", lambda: _jsonl(_chat_with({"role": "user", "content": PARTS})), "sft",
                      2, "messages[0].content[1].type", REFUSED_PARTS),
    "content a number": ("train.jsonl", lambda: _jsonl(_chat_with({"role": "user", "content": 5})), "sft",
                         2, "messages[0].content", "expected a string, got int"),
    "content an object": ("train.jsonl", lambda: _jsonl(_chat_with({"role": "user", "content": {"a": 1}})), "sft",
                          2, "messages[0].content", "expected a string, got object"),
    "role a number": ("train.jsonl", lambda: _jsonl(_chat_with({"role": 3, "content": "q"})), "sft",
                      2, "messages[0].role", "expected a string, got int"),
    "prompt a bool": ("train.jsonl", lambda: _jsonl('{"prompt": true, "completion": "a"}', PC), "sft",
                      2, "prompt", "expected a string, got bool"),
    "completion null": ("train.jsonl", lambda: _jsonl('{"prompt": "q", "completion": null}', PC), "sft",
                        2, "completion", "expected a string, got null"),
    "system a number": ("train.jsonl", lambda: _jsonl('{"prompt": "q", "completion": "a", "system": 0}', PC), "sft",
                        2, "system", "expected a string, got int"),
    "instruction a number": ("train.jsonl", lambda: _jsonl('{"instruction": 5, "response": "a"}',
                                                           {"instruction": "q", "response": "a"}), "sft",
                             2, "instruction", "expected a string, got int"),
    "text a list": ("train.jsonl", lambda: _jsonl('{"text": ["a"]}', {"text": "a"}), "sft",
                    2, "text", "expected a string, got list"),
    "message not an object": ("train.jsonl", lambda: _jsonl('{"messages": ["hi", {"role": "assistant", "content": '
                                                            '"x"}]}'), "sft",
                              2, "messages[0]", "expected a message (an object with 'role' and 'content'), got string"),
    "message null": ("train.jsonl", lambda: _jsonl('{"messages": [null, {"role": "assistant", "content": "x"}]}'),
                     "sft", 2, "messages[0]", "expected a message (an object with 'role' and 'content'), got null"),
    "messages not a list": ("train.jsonl", lambda: _jsonl('{"messages": {"role": "user"}}'), "sft",
                            2, "messages", "expected a list of messages, got object"),
    "pair answer of content parts": ("pairs.jsonl", lambda: _jsonl(json.dumps(
        {**PAIR, "chosen": [{"role": "assistant", "content": PARTS}]}), PAIR), "dpo",
        2, "chosen[0].content[1].type", REFUSED_PARTS),
    "pair prompt message a number": ("pairs.jsonl", lambda: _jsonl(json.dumps(
        {**PAIR, "prompt": [{"role": "user", "content": 7}]}), PAIR), "dpo",
        2, "prompt[0].content", "expected a string, got int"),
    "NaN": ("train.jsonl", lambda: _jsonl('{"prompt": "q", "completion": "a", "id": NaN}', PC), "sft",
            2, "record", "invalid JSON: NaN/Infinity are not JSON numbers (found NaN)"),
    # Python's json keeps a repeated key's last value and polars its first: which one a record means would depend
    # on the reader, so it is refused by name.
    "duplicate keys": ("train.jsonl", lambda: _jsonl('{"prompt": "q", "prompt": "r", "completion": "a"}', PC), "sft",
                       2, "record", 'invalid JSON: the key "prompt" appears twice in one object; keep one'),
    "Infinity": ("train.jsonl", lambda: _jsonl('{"prompt": "q", "completion": "a", "id": Infinity}', PC), "sft",
                 2, "record", "invalid JSON: NaN/Infinity are not JSON numbers (found Infinity)"),
    "-Infinity as a weight": ("train.jsonl", lambda: _jsonl(_chat_with({"role": "user", "content": "q"}).replace(
        '"x"}', '"x", "weight": -Infinity}')), "sft",
        2, "record", "invalid JSON: NaN/Infinity are not JSON numbers (found -Infinity)"),
    "5,000-digit integer": ("train.jsonl", lambda: _jsonl('{"prompt": "q", "completion": "a", "id": ' + "9" * 5000
                                                          + "}", PC), "sft",
                            2, "record", "invalid JSON: a number with more than 4,300 digits"),
    "huge float": ("train.jsonl", lambda: _jsonl('{"prompt": "q", "completion": "a", "id": 1e400}', PC), "sft",
                   2, "record", "invalid JSON: the number 1e400 is too large for a 64-bit float"),
    "huge negative float": ("train.jsonl", lambda: _jsonl('{"prompt": "q", "completion": "a", "id": -' + "9" * 400
                                                          + '.5}', PC), "sft",
                            2, "record", "invalid JSON: the number -99999999999999999999999... is too large"),
    "lone surrogate": ("train.jsonl", lambda: _jsonl(_chat_with({"role": "user", "content": "hi \ud800"})), "sft",
                       2, "messages[0].content", "contains an unpaired UTF-16 surrogate \\ud800"),
    "lone low surrogate in metadata": ("train.jsonl", lambda: _jsonl(json.dumps({**PC, "metadata": {"k": ["\udc01"]}}),
                                                                     PC), "sft",
                                       2, "metadata.k[0]", "contains an unpaired UTF-16 surrogate \\udc01"),
    "surrogate in a key": ("train.jsonl", lambda: _jsonl(json.dumps({**PC, "metadata": {"\ud83d": 1}}), PC), "sft",
                           2, "metadata", "a key contains an unpaired UTF-16 surrogate \\ud83d"),
    "100,000 nested lists": ("train.jsonl", lambda: _jsonl('{"prompt": "q", "completion": "a", "metadata": '
                                                           + "[" * 100_000 + "]" * 100_000 + "}", PC), "sft",
                             2, "record", f"invalid JSON: nested too deeply (over {MAX_NESTING} levels"),
    "nested objects, unclosed": ("train.jsonl", lambda: _jsonl('{"prompt": "q", "completion": "a", "metadata": '
                                                               + '{"a":' * 20_000, PC), "sft",
                                 2, "record", "invalid JSON: nested too deeply"),
    "over-long line": ("train.jsonl", lambda: _jsonl('{"prompt": "' + "x" * 2_000_000 + '", "completion": "a"}', PC),
                       "sft", 2, "record", "record is 2,000,033 bytes, over the 1 MiB limit for one record"),
    "weight an object": ("train.jsonl", lambda: _jsonl(_chat_with({"role": "user", "content": "q"}).replace(
        '"x"}', '"x", "weight": {"a": [1, 2, 3]}}')), "sft", 2, "messages[1].weight", '{"a": [1, 2, 3]} is not 0 or 1'),
    # CSV: the messages column holds JSON, read as strictly as a JSONL line.
    "CSV messages with NaN": ("train.csv", lambda: _csv({"messages": _messages_column(
        GOOD_MESSAGES, [{"role": "user", "content": float("nan")}])}), "sft",
        3, "messages", "invalid JSON: NaN/Infinity are not JSON numbers"),
    "CSV messages with content parts": ("train.csv", lambda: _csv({"messages": _messages_column(
        GOOD_MESSAGES, [{"role": "user", "content": PARTS}, GOOD_MESSAGES[1]])}), "sft",
        3, "messages[0].content[1].type", REFUSED_PARTS),
    "CSV messages with a lone surrogate": ("train.csv", lambda: _csv({"messages": _messages_column(
        [{"role": "user", "content": "\udfff"}, GOOD_MESSAGES[1]], GOOD_MESSAGES)}), "sft",
        2, "messages[0].content", "contains an unpaired UTF-16 surrogate \\udfff"),
    "CSV messages nested too deeply": ("train.csv", lambda: _csv({"messages": ["[" * 5000 + "]" * 5000]}), "sft",
                                       2, "messages", "invalid JSON: nested too deeply"),
    "CSV cell over the limit": ("train.csv", lambda: _csv({"prompt": ["q", "r"], "completion": ["a", "b" * 1_500_000]}),
                                "sft", 3, "completion",
                                "value is 1,500,000 bytes, over the 1 MiB limit for one record"),
    # Parquet: columns of the wrong type are named with the type, not read as empty content.
    "Parquet prompt of int64": ("train.parquet", lambda: _parquet(prompt=[1, 2], completion=["a", "b"]), "sft",
                                1, "prompt", "expected a string, got int"),
    "Parquet completion of list<string>": ("train.parquet", lambda: _parquet(prompt=["q"], completion=[["a", "b"]]),
                                           "sft", 1, "completion[0]", "expected a message (an object with 'role' "
                                           "and 'content'), got string"),
    "Parquet prompt of binary": ("train.parquet", lambda: _parquet(prompt=[b"q"], completion=["a"]), "sft",
                                 1, "prompt", "expected a string, got bytes"),
    "Parquet completion of date": ("train.parquet",
                                   lambda: _parquet(prompt=["q"], completion=[datetime.date(2024, 1, 1)]),
                                   "sft", 1, "completion", "expected a string, got date"),
    "Parquet system of decimal": ("train.parquet", lambda: _parquet(prompt=["q"], completion=["a"],
                                                                    system=[decimal.Decimal("1.5")]), "sft",
                                  1, "system", "expected a string, got Decimal"),
    "Parquet completion of struct": ("train.parquet", lambda: _parquet(prompt=["q"], completion=[{"text": "a"}]),
                                     "sft", 1, "completion", "expected a string, got object"),
    "Parquet message content of int64": ("train.parquet", lambda: _parquet(messages=[
        [{"role": "user", "content": 1}, {"role": "assistant", "content": 2}]]), "sft",
        1, "messages[0].content", "expected a string, got int"),
    "Parquet content parts": ("train.parquet", lambda: _parquet(messages=[
        [{"role": "user", "content": PARTS}]]), "sft", 1, "messages[0].content[1].type", REFUSED_PARTS),
    "Parquet cell over the limit": ("train.parquet", lambda: _parquet(prompt=["q", "x" * 1_200_000],
                                                                      completion=["a", "b"]), "sft",
                                    2, "prompt", "value is 1,200,000 bytes, over the 1 MiB limit for one record"),
    "Parquet list cell over the limit": ("train.parquet", lambda: _parquet(prompt=["q"], completion=[
        ["y" * 600_000, "z" * 600_000]]), "sft", 1, "completion", "value is 1,200,016 bytes, over the 1 MiB limit"),
    # A kilobyte of Parquet that would be over a gigabyte of Python objects: a list's elements count, null or not.
    "Parquet list of millions of nulls": ("train.parquet", lambda: _parquet(
        prompt=["q", "r"], completion=["a", "b"],
        metadata=pa.array([None, [None] * 2_000_000], pa.list_(pa.struct([("a", pa.int8())])))), "sft",
        2, "metadata", "value is 16,000,000 bytes, over the 1 MiB limit"),
}


def _validate(path: Path, objective: str = "sft", chunk_bytes: int | None = None):
    kw = {"chunk_bytes": chunk_bytes} if chunk_bytes else {}
    return validate_to_parquet({"train": path}, 0.1, path.with_name("examples.parquet"), 1, None, objective, **kw)


@pytest.mark.parametrize("case", sorted(ROW_CASES))
def test_each_bad_row_is_named_by_file_line_and_field(tmp_path, case):
    name, content, objective, line, field, message = ROW_CASES[case]
    path = tmp_path / name
    path.write_bytes(content())
    check = _validate(path, objective)
    assert not check.outcome.passed
    expected = f"{name} line {line}, {field}: {message}"
    assert any(e.startswith(expected) for e in check.outcome.error_lines()), check.outcome.error_lines()
    assert check.outcome.n_row_errors == 1 or name.endswith(".parquet"), check.outcome.error_lines()


def _zip(data: bytes) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("train.jsonl", data)
    return out.getvalue()


def _truncated_parquet() -> bytes:
    data = _parquet(prompt=["q"] * 500, completion=["a"] * 500)
    return data[: len(data) // 2]


def _parquet_with_invalid_utf8() -> bytes:
    offsets = pa.py_buffer(b"\x00\x00\x00\x00\x04\x00\x00\x00")
    strings = pa.Array.from_buffers(pa.string(), 1, [None, offsets, pa.py_buffer(b"a\xff\xfeb")])
    return _parquet(prompt=strings, completion=["a"])


def _parquet_with_duplicate_names() -> bytes:
    out = io.BytesIO()
    pq.write_table(pa.Table.from_arrays([pa.array(["q"]), pa.array(["a"])], names=["prompt", "prompt"]), out)
    return out.getvalue()


JSONL_BYTES = _jsonl(json.dumps(CHAT))

# name -> (file name, content, what the error says after "<file name>: ")
FILE_CASES = {
    "gzip": ("train.jsonl", lambda: gzip.compress(JSONL_BYTES), "this file is gzip-compressed; upload it uncompressed"),
    "zip": ("train.jsonl", lambda: _zip(JSONL_BYTES), "this file is a zip archive; unpack it"),
    "bzip2 CSV": ("train.csv", lambda: bz2.compress(b"prompt,completion\nq,a\n"), "this file is bzip2-compressed"),
    "xz": ("train.jsonl", lambda: lzma.compress(JSONL_BYTES), "this file is xz-compressed"),
    "zstd": ("train.jsonl", lambda: b"\x28\xb5\x2f\xfd" + os.urandom(64), "this file is zstd-compressed"),
    "gzip Parquet": ("train.parquet", lambda: gzip.compress(_parquet(prompt=["q"], completion=["a"])),
                     "this file is gzip-compressed"),
    "PNG as JSONL": ("train.jsonl", lambda: b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + os.urandom(200),
                     "looks binary (NUL bytes), not text"),
    "NUL bytes in a CSV": ("train.csv", lambda: b"prompt,completion\nq\x00,a\n", "looks binary (NUL bytes), not text"),
    "UTF-16 CSV": ("train.csv", lambda: "prompt,completion\nq,a\n".encode("utf-16"), "this file is UTF-16"),
    "Parquet named .jsonl": ("train.jsonl", lambda: _parquet(prompt=["q"], completion=["a"]),
                             "this file is Parquet; name it .parquet"),
    "random bytes as Parquet": ("train.parquet", lambda: b"PAR1" + os.urandom(3000), "not a valid Parquet file"),
    "truncated Parquet": ("train.parquet", _truncated_parquet, "not a valid Parquet file"),
    "empty Parquet": ("train.parquet", lambda: b"", "not a valid Parquet file"),
    "Parquet string not UTF-8": ("train.parquet", _parquet_with_invalid_utf8, "cannot read the rows from row 1 on"),
    # polars reads a field name cut at its NUL byte, so "\x00" and "" are one field to it (found by Hypothesis).
    "Parquet field names NUL and empty": ("train.parquet", lambda: _parquet(messages=pa.array(
        [[{"\x00": None, "": {"": "hi"}}]])), 'column "messages[]": the field name "\\u0000" holds a NUL byte'),
    "Parquet nested field name with NUL": ("train.parquet", lambda: _parquet(messages=pa.array(
        [[{"role": "user", "content": {"a\x00b": 1}}]])),
        'column "messages[].content": the field name "a\\u0000b" holds a NUL byte'),
    "Parquet column name with NUL": ("train.parquet", lambda: _parquet(**{"prompt\x00": ["q"], "completion": ["a"]}),
                                     'the column name "prompt\\u0000" holds a NUL byte'),
    "Parquet duplicate columns": ("train.parquet", _parquet_with_duplicate_names,
                                  'column "prompt" appears more than once'),
    "Parquet decimal256": ("train.parquet", lambda: _parquet(
        prompt=pa.array([1], pa.int64()).cast(pa.decimal256(40, 2)), completion=["a"]),
        'column "prompt" has type decimal256(40, 2), which cannot be read'),
    "CSV ragged row": ("train.csv", lambda: b"prompt,completion\nq,a\nr,b,extra\n",
                       "not a well-formed CSV file (line 3: 3 fields where the header has 2)"),
    "CSV unterminated quote": ("train.csv", lambda: b'prompt,completion\nq,a\nr,"b\ns,c\n',
                               "not a well-formed CSV file (line 3: a quoted field is never closed)"),
    "CSV duplicate columns": ("train.csv", lambda: b"prompt,prompt,completion\nq,r,a\n",
                              'column "prompt" appears more than once'),
    "CSV of 20,000 columns": ("train.csv", lambda: (",".join(f"c{i}" for i in range(20_000)) + "\n"
                                                    + ",".join("x" * 20_000) + "\n").encode(),
                              "has 20,000 columns, over the 64 an upload may have"),
}


@pytest.mark.parametrize("case", sorted(FILE_CASES))
def test_a_file_that_cannot_be_read_is_one_file_level_error(tmp_path, case):
    name, content, reason = FILE_CASES[case]
    path = tmp_path / name
    path.write_bytes(content())
    with pytest.raises(UnreadableFile) as exc:
        _validate(path)
    assert str(exc.value).startswith(f"{name}: {reason}"), str(exc.value)
    assert not path.with_name("examples.parquet").exists() and not path.with_name("examples.parquet.tmp").exists()


# name -> (file name, content, passes): odd but harmless files, read without an exception.
HARMLESS = {
    "empty JSONL": ("train.jsonl", lambda: b"", False),
    "whitespace only": ("train.jsonl", lambda: b"  \n\t\n\r\n", False),
    "BOM and CRLF": ("train.jsonl", lambda: b"\xef\xbb\xbf" + JSONL_BYTES.replace(b"\n", b"\r\n"), True),
    "surrogate pairs escaped": ("train.jsonl", lambda: _jsonl(json.dumps({"prompt": "\U0001f600 ok",
                                                                          "completion": "a"}), PC), True),
    "header-only CSV": ("train.csv", lambda: b"prompt,completion\n", False),
    "empty CSV": ("train.csv", lambda: b"", False),
    "CSV with a BOM and CRLF": ("train.csv", lambda: b"\xef\xbb\xbfprompt,completion\r\nq,a\r\n", True),
    "Parquet without columns": ("train.parquet", lambda: _parquet(), False),
    "Parquet with odd metadata": ("train.parquet", lambda: _parquet(
        prompt=["q"], completion=["a"],
        metadata=pa.array([{"nested": {"deeper": [1, 2]}, "map": [(1, "x")], "when": datetime.date(2024, 1, 1)}],
                          pa.struct([("nested", pa.struct([("deeper", pa.list_(pa.int64()))])),
                                     ("map", pa.map_(pa.int64(), pa.string())), ("when", pa.date32())]))), True),
    "Parquet with a null column": ("train.parquet", lambda: _parquet(prompt=["q"], completion=["a"],
                                                                     system=pa.array([None], pa.null())), True),
}


@pytest.mark.parametrize("case", sorted(HARMLESS))
def test_odd_but_harmless_files_do_not_raise(tmp_path, case):
    name, content, passes = HARMLESS[case]
    path = tmp_path / name
    path.write_bytes(content())
    check = _validate(path)
    assert check.outcome.passed == passes, check.outcome.error_lines()
    assert check.outcome.n_row_errors == 0


def test_one_bad_row_among_good_ones_is_the_only_error(tmp_path):
    rows = [json.dumps({"messages": [{"role": "user", "content": f"question {i}"},
                                     {"role": "assistant", "content": f"answer {i}"}]}) for i in range(120)]
    rows[56] = _chat_with({"role": "user", "content": PARTS})
    path = tmp_path / "train.jsonl"
    path.write_text("\n".join(rows) + "\n")
    check = _validate(path, chunk_bytes=2_000)  # most chunks take the vectorized path, the bad one the exact one
    assert [str(e) for e in check.outcome.errors] == [
        f"train.jsonl line 57, messages[0].content[1].type: {REFUSED_PARTS}; keep the text parts only"]
    assert check.outcome.n_row_errors == 1 and check.outcome.n_examples == 120
    examples = pl.read_parquet(path.with_name("examples.parquet"))
    assert examples.filter(pl.col("messages").is_not_null()).height == 119


def test_an_over_long_line_is_skipped_without_losing_the_line_count(tmp_path):
    path = tmp_path / "train.jsonl"
    good = json.dumps(PC)
    long_line = '{"prompt": "' + "x" * 3_000_000 + '"}'
    path.write_text("\n".join([good, long_line, good, "{oops", good]) + "\n")
    chunks = list(iter_line_chunks(path, chunk_bytes=64 << 10))
    assert {line: n for c in chunks for line, n in c.too_long.items()} == {2: len(long_line)}
    assert max(len(c.data) for c in chunks) < (64 << 10) + (1 << 20)
    check = _validate(path, chunk_bytes=64 << 10)
    assert [(e.line, e.field) for e in check.outcome.errors] == [(2, "record"), (4, "record")]
    assert check.outcome.errors[1].message.startswith("invalid JSON: Expecting property name")


_MEMORY_PROBE = """
import json, resource, sys
from ftpipe.data.pipeline import validate_to_parquet
path = sys.argv[1]
with open(path, "wb") as f:
    f.write(json.dumps({"prompt": "q", "completion": "a"}).encode() + b"\\n" + b'{"prompt": "')
    block = b"x" * (1 << 20)
    for _ in range(100):  # 100 MB, and no newline to end it
        f.write(block)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
check = validate_to_parquet({"train": path}, 0.1, path + ".parquet", 1, None)
grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
print(json.dumps({"grown_mb": grown_mb, "errors": [str(e) for e in check.outcome.errors]}))
"""


def test_a_100_mb_line_without_newline_is_refused_in_bounded_memory(tmp_path):
    out = subprocess.run([sys.executable, "-c", _MEMORY_PROBE, str(tmp_path / "train.jsonl")], capture_output=True,
                         text=True, timeout=120, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["errors"] == ["train.jsonl line 2, record: record is 104,857,612 bytes, over the 1 MiB limit for "
                                "one record; split or shorten it"]
    assert result["grown_mb"] < 300, result


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024
    except (OSError, StopIteration):
        return 0.0  # gone, or no /proc: the probe's own measure still says


def _probe(tmp_path: Path, script: str, *args: str, max_mb: float = 2000, timeout: float = 180) -> dict:
    """``script`` in a fresh interpreter, the JSON it prints last. Killed when it holds more than ``max_mb``: a
    decompression bomb that gets through must fail the test, not take the machine's memory."""
    out, err = tmp_path / "probe.out", tmp_path / "probe.err"
    with open(out, "w") as stdout, open(err, "w") as stderr:
        proc = subprocess.Popen([sys.executable, "-c", script, *args], stdout=stdout, stderr=stderr)
        deadline, peak = time.monotonic() + timeout, 0.0
        while proc.poll() is None:
            peak = max(peak, _rss_mb(proc.pid))
            if peak > max_mb or time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                pytest.fail(f"killed: {peak:,.0f} MB after {timeout - deadline + time.monotonic():.0f} s")
            time.sleep(0.05)
    assert proc.returncode == 0, err.read_text()[-3000:]
    return json.loads(out.read_text().strip().splitlines()[-1])


_PARQUET_BOMB = """
import json, resource, sys, time
import pyarrow as pa, pyarrow.parquet as pq
from ftpipe.data.pipeline import validate_to_parquet
from ftpipe.data.read import UnsupportedFormat
path, count, value_bytes, shape, schema = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
value = pa.array(["word " * (value_bytes // 5)])  # compresses to a few hundred bytes
repeated = pa.DictionaryArray.from_arrays(pa.array([0] * count, pa.int32()), value)
column = repeated if shape == "rows" else pa.ListArray.from_arrays(pa.array([0, count], pa.int32()), repeated)
# "stored": the Arrow schema is in the file and pyarrow reads the column back as a dictionary; "plain": as strings
pq.write_table(pa.table({"text": column}), path, compression="zstd", store_schema=schema == "stored")
del value, repeated, column
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.monotonic()
try:
    check = validate_to_parquet({"train": path}, 0.1, path + ".out", 1, None)
    result = {"records": check.stats["records"], "errors": [str(e) for e in check.outcome.errors]}
except UnsupportedFormat as exc:
    result = {"refused": str(exc)}
result.update(seconds=time.monotonic() - start,
              grown_mb=(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024)
print(json.dumps(result))
"""


@pytest.mark.parametrize("count, value_bytes, shape, schema", [
    (2000, 900_000, "rows", "stored"),  # 1.8 GB of text from 560 bytes
    (2000, 900_000, "rows", "plain"),
    (3000, 1_000_000, "list", "plain"),  # 3 GB in one row: pyarrow would decode it before anyone could measure it
])
def test_a_parquet_decompression_bomb_is_refused_before_it_is_decoded(tmp_path, count, value_bytes, shape, schema):
    path = tmp_path / "train.parquet"
    result = _probe(tmp_path, _PARQUET_BOMB, str(path), str(count), str(value_bytes), shape, schema)
    size = path.stat().st_size
    assert size < 1000
    assert result.get("refused") == (f"train.parquet: decompresses to more than 1,024 MiB of text from {size:,} "
                                     "bytes (over 200 times its size); upload it uncompressed or as JSONL"), result
    assert result["seconds"] < 10 and result["grown_mb"] < 500, result


def test_a_parquet_bomb_under_the_cap_is_validated_a_bounded_frame_at_a_time(tmp_path):
    """180 MB of text from 560 bytes, every row under the record limit: it is validated like any upload of that
    much text, in frames of ``TABLE_BATCH_BYTES`` (in 50,000-row frames, one MinHash pass took 2.9 GB)."""
    result = _probe(tmp_path, _PARQUET_BOMB, str(tmp_path / "train.parquet"), "200", "900000", "rows", "stored",
                    max_mb=1200)
    assert result.get("records") == 200 and result["errors"] == [], result
    assert result["seconds"] < 60 and result["grown_mb"] < 500, result


@pytest.mark.parametrize("count, value_bytes, shape, message", [
    # 40 rows of one 20 MB value, a 900-byte file: pyarrow decodes 64 rows at a time into 1.3 GB.
    (40, 20_000_000, "rows", "value is 20,000,000 bytes, over the 1 MiB limit for one record"),
    # one row holding a 100 KB value 3,000 times: 300 MB once decoded.
    (3000, 100_000, "list", "value is 300,024,000 bytes, over the 1 MiB limit for one record"),
])
def test_parquet_rows_over_the_limit_are_refused_without_being_decoded(tmp_path, count, value_bytes, shape, message):
    result = _probe(tmp_path, _PARQUET_BOMB, str(tmp_path / "train.parquet"), str(count), str(value_bytes), shape,
                    "plain")
    assert result["errors"][0] == f"train.parquet line 1, text: {message}; split or shorten it", result
    assert len(result["errors"]) == (count if shape == "rows" else 1)
    assert result["seconds"] < 10 and result["grown_mb"] < 300, result


def test_table_batches_are_bounded_in_bytes_and_keep_their_row_numbers(tmp_path, monkeypatch):
    monkeypatch.setattr(read, "TABLE_BATCH_BYTES", 1_000)
    sizes = [10, 600, 300, 2_500, 5, 5, 980, 20]  # and a byte of completion each; 2,501 bytes: a batch of its own
    prompts = ["p" * n for n in sizes]
    expected = [[1, 2, 3], [4], [5, 6, 7], [8]]
    pq.write_table(pa.table({"prompt": pa.array(prompts).dictionary_encode(), "completion": ["a"] * 8}),
                   tmp_path / "t.parquet", row_group_size=3)
    pl.DataFrame({"prompt": prompts, "completion": ["a"] * 8}).write_csv(tmp_path / "t.csv")
    for name, lines in (("t.parquet", expected), ("t.csv", [[n + 1 for n in batch] for batch in expected])):
        batches = list(read.record_batches(tmp_path / name))
        assert [[r.line for r in batch] for batch in batches] == lines, name
        assert [r.data["prompt"] for batch in batches for r in batch] == prompts
    # The platform's own files, read back with a byte budget: the same rows.
    frames = list(read.parquet_frames(tmp_path / "t.parquet", ["prompt"], batch_rows=100, max_bytes=1_000))
    assert [f.height for f in frames] == [3, 1, 3, 1]
    assert pl.concat(frames)["prompt"].to_list() == prompts


def test_the_vectorized_path_leaves_what_polars_misreads_to_the_exact_path(tmp_path):
    for clean, hostile in [
        (PC, '{"prompt": "q\\ud800", "completion": "a"}'),  # polars decodes a lone high surrogate to NUL
        (PC, '{"prompt": "q", "completion": "a", "metadata": ' + "[" * 1000 + "]" * 1000 + "}"),  # it would recurse
        (PC, '{"prompt": "q", "completion": "a", "id": NaN}'),
        (PC, '{"prompt": "q", "completion": "a", "id": 1e400}'),
        (PC, '{"prompt": "' + "x" * (2 << 20) + '", "completion": "a"}'),
        (CHAT, '{"messages": [null, {"role": "assistant", "content": "x"}]}'),
    ]:
        lines = pl.Series([json.dumps(clean)] * 3 + [hostile])
        assert normalize_lines_fast(lines, 1, "t.jsonl") is None, hostile[:60]
    # Escaped surrogate pairs (json.dumps' default for emoji) stay on the vectorized path, and decode the same.
    path = tmp_path / "emoji.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"\U0001f600 {i} \U0001f680", "completion": "ok"}) + "\n"
                            for i in range(20)))
    assert normalize_lines_fast(pl.Series(path.read_text().splitlines()), 1, "emoji.jsonl") is not None
    assert normalize_file(path).equals(normalize(read_records(path)))


def test_ftpipe_validate_reports_a_hostile_row_without_a_traceback(tmp_path, monkeypatch, capsys, tiny_model):
    from ftpipe_cli.main import main

    monkeypatch.setenv("FTPIPE_HOME", str(tmp_path / "home"))
    path = tmp_path / "train.jsonl"
    path.write_bytes(_jsonl(_chat_with({"role": "user", "content": PARTS})))
    assert main(["validate", str(path), "--min-examples", "1"]) == 1
    out, err = capsys.readouterr()
    assert f"| train.jsonl | 2 | messages[0].content[1].type | {REFUSED_PARTS}" in out
    assert "Traceback" not in out + err

    path.write_bytes(gzip.compress(JSONL_BYTES))
    assert main(["validate", str(path), "--min-examples", "1"]) == 2
    out, err = capsys.readouterr()
    assert "ftpipe: error: train.jsonl: this file is gzip-compressed; upload it uncompressed" in err
    assert "Traceback" not in out + err


# --- fuzzing ---------------------------------------------------------------------------------------------------

FUZZ = settings(max_examples=60, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# Text with lone surrogates ("Cs") and control characters among the rest.
TEXT = st.text(st.characters(exclude_categories=()), max_size=12)
SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | TEXT
JSON_VALUES = st.recursive(SCALARS,
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
                           max_leaves=12)
FIELDS = ["messages", "role", "content", "prompt", "completion", "chosen", "rejected", "system", "instruction",
          "input", "response", "text", "weight", "id", "metadata", "preferred_output", "non_preferred_output"]
MESSAGES = st.lists(st.dictionaries(st.sampled_from(["role", "content", "weight", "name"]),
                                    st.sampled_from(["user", "assistant", "system", "tool", "", "x"]) | JSON_VALUES,
                                    max_size=4) | JSON_VALUES, max_size=4)
RECORDS = st.dictionaries(st.sampled_from(FIELDS), MESSAGES | JSON_VALUES, max_size=5)


def _survives(path: Path, objective: str = "sft") -> None:
    """Validation returns, or refuses the file as a whole: nothing else may escape."""
    try:
        _validate(path, objective, chunk_bytes=512)
    except UnsupportedFormat:
        pass


def _dump(value, ensure_ascii: bool) -> bytes:
    # Without ensure_ascii a lone surrogate is written raw, as CESU bytes: the file is then not UTF-8.
    return json.dumps(value, ensure_ascii=ensure_ascii).encode("utf-8", "surrogatepass")


@FUZZ
@given(data=st.binary(max_size=600), suffix=st.sampled_from([".jsonl", ".csv", ".parquet"]))
def test_fuzz_random_bytes(data, suffix):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"train{suffix}"
        path.write_bytes(data)
        _survives(path)


@FUZZ
@given(lines=st.lists(JSON_VALUES, max_size=6), ensure_ascii=st.booleans())
def test_fuzz_random_json_lines(lines, ensure_ascii):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "train.jsonl"
        path.write_bytes(b"\n".join(_dump(v, ensure_ascii) for v in lines))
        _survives(path)


@FUZZ
@given(records=st.lists(RECORDS, min_size=1, max_size=6), ensure_ascii=st.booleans(),
       objective=st.sampled_from(["sft", "dpo"]))
def test_fuzz_records_with_the_real_field_names_as_jsonl(records, ensure_ascii, objective):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "train.jsonl"
        path.write_bytes(b"\n".join(_dump(r, ensure_ascii) for r in records) + b"\n")
        _survives(path, objective)


@FUZZ
@given(lines=st.lists(st.text("ab{}\r", max_size=40), max_size=30), end_newline=st.booleans(),
       chunk_bytes=st.integers(1, 64))
def test_fuzz_line_chunks_keep_every_line_and_its_number(lines, end_newline, chunk_bytes):
    from ftpipe.data import read

    data = "\n".join(lines).encode() + (b"\n" if end_newline else b"")
    expected = data.split(b"\n")
    if expected[-1] == b"":
        expected.pop()  # a file's last newline ends its last line; it does not start another
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as patch:
        patch.setattr(read, "MAX_RECORD_BYTES", 16)
        path = Path(tmp) / "t.jsonl"
        path.write_bytes(data)
        seen = {}
        for chunk in iter_line_chunks(path, chunk_bytes=chunk_bytes):
            assert len(chunk.data) <= chunk_bytes + 16
            parts = chunk.data.split(b"\n")
            if chunk.data.endswith(b"\n"):
                parts.pop()
            for line_no, part in enumerate(parts, start=chunk.first_line):
                assert line_no not in seen
                seen[line_no] = (b"", len(expected[line_no - 1])) if line_no in chunk.too_long else (part, None)
                if line_no in chunk.too_long:
                    assert part == b"" and chunk.too_long[line_no] == len(expected[line_no - 1]) > 16
    assert sorted(seen) == list(range(1, len(expected) + 1))
    assert all(part == expected[n - 1] for n, (part, dropped) in seen.items() if dropped is None)


def _cell(value) -> str | None:
    return value if isinstance(value, str) or value is None else json.dumps(value)


@FUZZ
@given(records=st.lists(RECORDS, min_size=1, max_size=6), objective=st.sampled_from(["sft", "dpo"]))
def test_fuzz_records_with_the_real_field_names_as_csv_and_parquet(records, objective):
    columns = sorted({k for r in records for k in r})
    with tempfile.TemporaryDirectory() as tmp:
        # CSV holds text: every value as its JSON text (messages is read back as JSON), surrogates kept raw.
        csv_path = Path(tmp) / "train.csv"
        with open(csv_path, "w", encoding="utf-8", errors="surrogatepass", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(columns)
            writer.writerows([_cell(r.get(c)) for c in columns] for r in records)
        _survives(csv_path, objective)
        # Parquet: a column of one type as arrow infers it, else the JSON text of its values.
        table = {}
        for c in columns:
            values = [r.get(c) for r in records]
            try:
                table[c] = pa.array(values)
            except (pa.ArrowException, OverflowError, TypeError, ValueError):
                table[c] = pa.array([json.dumps(v) for v in values])
        try:
            data = _parquet(**table)
        except (pa.ArrowException, UnicodeEncodeError):
            return  # pyarrow cannot write it (e.g. a surrogate): no tenant can upload it either
        parquet_path = Path(tmp) / "train.parquet"
        parquet_path.write_bytes(data)
        _survives(parquet_path, objective)
