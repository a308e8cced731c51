"""Validation in bounded memory: chunk by chunk, the same findings as the whole file at once."""

import json
from collections import Counter

import polars as pl
import pytest

from ftpipe import synthetic
from ftpipe.data import quality, schema
from ftpipe.data.pipeline import check_examples, load_examples, validate_to_parquet


def _chat(q: str, a: str) -> dict:
    return {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}


def _acme(n: int) -> list[dict]:
    return [{"messages": conversation} for conversation in synthetic.acme_support(n)]


def _write(path, rows) -> None:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))


def _summary(check) -> dict:
    return {"errors": [str(e) for e in check.outcome.errors], "dataset_errors": check.outcome.dataset_errors,
            "warnings": {w.kind: (w.count, w.locations) for w in check.warnings}, "stats": check.stats}


def test_small_chunks_find_exactly_what_the_whole_file_finds(tmp_path):
    refund = ("Our refund policy allows returns of unused items within thirty days of delivery when you keep the "
              "original receipt and the packaging is undamaged")
    rows = _acme(300)
    rows[40] = _chat(refund, "Understood.")
    rows[250] = _chat(refund + " please", "Understood.")  # a near-duplicate many chunks later
    rows[260] = rows[12]  # an exact duplicate, across chunks
    rows[270] = _chat("my key is sk-proj0123456789abcdefghijKLMNOP", "Please rotate it.")
    rows.insert(100, "{not json")
    _write(tmp_path / "train.jsonl", rows)
    _write(tmp_path / "eval.jsonl", [rows[5], _chat("Something new?", "Yes.")])
    files = {"train": tmp_path / "train.jsonl", "eval": tmp_path / "eval.jsonl"}

    whole = check_examples(load_examples(files, 0.1), 10, None)
    out = tmp_path / "examples.parquet"
    streamed = validate_to_parquet(files, 0.1, out, 10, None, chunk_bytes=2_000)

    assert _summary(streamed) == _summary(whole)
    assert set(_summary(whole)["warnings"]) >= {"exact_duplicates", "near_duplicates", "pii", "train_eval_overlap"}
    assert whole.warnings[[w.kind for w in whole.warnings].index("near_duplicates")].locations == [
        "train.jsonl line 252 ~ train.jsonl line 41"]
    assert [str(e) for e in streamed.outcome.errors] == ["train.jsonl line 101, record: invalid JSON: Expecting "
                                                         "property name enclosed in double quotes at column 2"]
    assert pl.read_parquet(out).equals(load_examples(files, 0.1))


def test_a_shape_change_in_a_later_chunk_is_refused_with_its_line(tmp_path):
    rows = _acme(60) + [{"prompt": "What is Acme?", "completion": "A company."}]
    _write(tmp_path / "train.jsonl", rows)
    check = validate_to_parquet({"train": tmp_path / "train.jsonl"}, 0.1, tmp_path / "e.parquet", 10, None,
                                chunk_bytes=1_000)
    (error,) = check.outcome.errors
    assert str(error) == ("train.jsonl line 61, record: shape 'prompt_completion' differs from the file's first "
                          "example (chat); one shape per file")


def test_every_bad_row_is_counted_though_only_the_first_are_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(schema, "MAX_KEPT_ERRORS", 5)
    monkeypatch.setattr(quality, "MAX_KEPT_LOCATIONS", 3)
    rows = _acme(30) + ["{broken"] * 12 + _acme(5) * 2  # five rows of the first 30 come back twice more
    _write(tmp_path / "train.jsonl", rows)
    check = validate_to_parquet({"train": tmp_path / "train.jsonl"}, 0.1, tmp_path / "e.parquet", 10, None,
                                chunk_bytes=500)
    assert check.outcome.n_row_errors == 12 and len(check.outcome.errors) == 5
    assert [e.line for e in check.outcome.errors] == [31, 32, 33, 34, 35]
    copies = Counter(json.dumps(r) for r in rows if not isinstance(r, str))
    groups = [n for n in copies.values() if n > 1]
    (dups,) = [w for w in check.warnings if w.kind == "exact_duplicates"]
    assert dups.count == sum(groups) - len(groups) and len(groups) > 3
    assert len(dups.locations) == 3 and dups.more_locations == len(groups) - 3
    assert str(dups).endswith(f"and {len(groups) - 3} more")


@pytest.mark.parametrize("name, content", [("train.jsonl", ""), ("train.csv", ""), ("train.csv", "prompt,completion\n"),
                                           ("train.parquet", None)])
def test_an_empty_upload_still_writes_a_table_with_the_columns(tmp_path, name, content):
    if content is None:
        pl.DataFrame(schema={"prompt": pl.String, "completion": pl.String}).write_parquet(tmp_path / name)
    else:
        (tmp_path / name).write_text(content)
    out = tmp_path / "e.parquet"
    check = validate_to_parquet({"train": tmp_path / name}, 0.1, out, 1, None)
    assert check.outcome.dataset_errors == ["too few valid examples: 0 (at least 1 required)"]
    assert {"messages", "split", "role", "line"} <= set(pl.read_parquet(out).columns)


def test_parquet_is_read_and_normalized_batch_by_batch(tmp_path, monkeypatch):
    from ftpipe.data import read
    from ftpipe.data.pipeline import normalized_chunks

    monkeypatch.setattr(read, "TABLE_BATCH_ROWS", 7)
    completions = [f"answer {i}" for i in range(40)]
    completions[23] = ""
    pl.DataFrame({"prompt": [f"question {i}" for i in range(40)], "completion": completions}).write_parquet(
        tmp_path / "d.parquet", row_group_size=10)
    chunks = list(normalized_chunks(tmp_path / "d.parquet"))
    assert [c.height for c in chunks] == [7] * 5 + [5]
    assert pl.concat(chunks)["line"].to_list() == list(range(1, 41))
    check = validate_to_parquet({"train": tmp_path / "d.parquet"}, 0.1, tmp_path / "e.parquet", 10, None)
    assert [str(e) for e in check.outcome.errors] == ["d.parquet line 24, messages: 1 message(s) with empty content"]


def test_csv_line_numbers_carry_across_batches_when_fields_span_lines(tmp_path, monkeypatch):
    from ftpipe.data import read

    monkeypatch.setattr(read, "TABLE_BATCH_ROWS", 3)
    prompts = [f"question {i}" + "\nmore" * (i % 3) for i in range(10)]  # records of 1, 2 and 3 lines
    completions = [f"answer {i}" for i in range(10)]
    completions[7] = ""
    pl.DataFrame({"prompt": prompts, "completion": completions}).write_csv(tmp_path / "d.csv")
    starts = [2 + sum(1 + i % 3 for i in range(k)) for k in range(10)]
    assert [r.line for r in read.read_records(tmp_path / "d.csv")] == starts
    check = validate_to_parquet({"train": tmp_path / "d.csv"}, 0.1, tmp_path / "e.parquet", 5, None)
    assert [str(e) for e in check.outcome.errors] == [
        f"d.csv line {starts[7]}, messages: 1 message(s) with empty content"]
