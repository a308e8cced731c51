"""The vectorized path and the exact per-line path produce the same rows, byte for byte."""

import json

import polars as pl
import pytest

from ftpipe import synthetic
from ftpipe.data.fast_normalize import normalize_lines_fast
from ftpipe.data.normalize import normalize
from ftpipe.data.pipeline import normalize_file
from ftpipe.data.read import read_records


def _exact(path) -> pl.DataFrame:
    return normalize(read_records(path))


def _chat_rows() -> list[dict]:
    rows = [{"messages": c} for c in synthetic.acme_support(50)]
    rows[3]["messages"].insert(0, {"role": "system", "content": "Ünïcode, \"quotes\", tabs\t and / slashes \u2028"})
    rows[4] = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo", "weight": 1}]}
    rows[5] = {"messages": [{"role": "assistant", "content": "Plain text for continued pre-training."}]}
    rows[6] = {"messages": [{"role": "user", "content": "   "}, {"role": "assistant", "content": "x"}]}  # an error row
    return rows


@pytest.mark.parametrize("chunk_bytes", [256, 1 << 20])
def test_chat_file_matches_the_exact_path(tmp_path, chunk_bytes):
    path = tmp_path / "chat.jsonl"
    text = "".join(json.dumps(r, ensure_ascii=False) + "\r\n" for r in _chat_rows())
    path.write_bytes(b"\xef\xbb\xbf" + text.replace("\r\n", "\r\n\r\n", 1).encode())  # BOM, CRLF, a blank line
    fast = normalize_file(path, chunk_bytes=chunk_bytes)
    assert fast.equals(_exact(path))
    assert fast["line"].to_list()[:3] == [1, 3, 4]


def test_prompt_completion_with_and_without_system_matches(tmp_path):
    rows = synthetic.globex_directory(30)
    rows[2]["system"] = "You are the directory."
    rows[3]["system"] = ""
    path = tmp_path / "pc.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert normalize_file(path).equals(_exact(path))


def test_a_clean_chunk_takes_the_fast_path_and_a_dirty_one_does_not():
    clean = pl.Series([json.dumps({"prompt": "q", "completion": "a"})] * 3)
    assert normalize_lines_fast(clean, 1, "f.jsonl").height == 3
    for dirty in ('{"prompt": "q"', '{"prompt": "q", "completion": "a", "extra": 1}', '{"prompt": "q"}', '[1]',
                  json.dumps({"messages": [{"role": "user", "content": "q"}]}),  # mixed shapes with the rows above
                  json.dumps({"prompt": "q", "completion": 5})):
        assert normalize_lines_fast(pl.concat([clean, pl.Series([dirty])]), 1, "f.jsonl") is None, dirty


def _agrees(tmp_path, rows: list[dict], fast: bool = True) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    lines = pl.Series(path.read_text().splitlines())
    assert (normalize_lines_fast(lines, 1, path.name) is not None) == fast
    assert normalize_file(path).equals(_exact(path))


def test_alpaca_and_instruction_files_match(tmp_path):
    rows = [{"instruction": f"Say {i}.", "input": "" if i % 3 else f"Context {i}", "output": f"{i}"}
            for i in range(20)]
    rows[4]["system"] = "Be brief."
    rows[6]["output"] = "  "  # an error row: empty content
    _agrees(tmp_path, rows)
    _agrees(tmp_path, [rows[0], {**rows[1], "input": None}], fast=False)  # a null: the exact path
    _agrees(tmp_path, [{"instruction": r["instruction"], "response": r["output"]} for r in rows])
    _agrees(tmp_path, [{**rows[0], "history": [["a", "b"]]}, rows[1]], fast=False)
    _agrees(tmp_path, [rows[0], {**rows[1], "output": 5}], fast=False)


def test_sharegpt_files_match(tmp_path):
    def conversation(i, turns=("human", "gpt")):
        return [{"from": who, "value": f"{who} says {i}"} for who in turns]

    rows = [{"conversations": conversation(i)} for i in range(20)]
    rows[2]["system"] = "Be brief."
    rows[3] = {"conversations": conversation(3, ("system", "human", "gpt", "human", "chatgpt"))}
    rows[4] = {"conversations": conversation(4, ("gpt", "human"))}  # an error row: out of order
    _agrees(tmp_path, rows)
    _agrees(tmp_path, [{"conversations": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}])
    for dirty in ({"conversations": conversation(1, ("human", "bot"))},
                  {"conversations": conversation(1, ("human", "function_call"))},
                  {"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": 5}]},
                  {"conversations": conversation(1), "tools": "[]"}):
        _agrees(tmp_path, [rows[0], dirty], fast=False)
