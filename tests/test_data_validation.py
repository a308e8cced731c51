import json

import polars as pl

from ftpipe import synthetic
from ftpipe.data.normalize import normalize
from ftpipe.data.read import read_records
from ftpipe.data.schema import validate_examples
from ftpipe.data.split import assign_split


def _validate(path, **kw):
    return validate_examples(normalize(read_records(path)), **kw)


def test_clean_chat_and_prompt_completion_pass(tmp_path):
    chat = tmp_path / "chat.jsonl"
    chat.write_text(synthetic.to_jsonl(synthetic.acme_support(20)))
    pc = tmp_path / "pc.jsonl"
    pc.write_text(synthetic.to_jsonl(synthetic.globex_directory(20)))
    assert _validate(chat, min_examples=20).passed
    assert _validate(pc, min_examples=20).passed


def test_every_broken_row_is_named_by_file_line_and_field(tmp_path):
    lines = synthetic.to_jsonl(synthetic.acme_support(10)).splitlines()
    for i, bad in enumerate(synthetic.broken_rows()):
        lines.insert(2 + 2 * i, bad)
    path = tmp_path / "tickets.jsonl"
    path.write_text("\n".join(lines) + "\n")
    outcome = _validate(path)
    found = {(e.line, e.field, e.message.split(":")[0]) for e in outcome.errors}
    assert found == {
        (3, "record", "invalid JSON"),
        (5, "messages", "no assistant turn"),
        (7, "messages[0].role", 'unknown role "customer" (allowed'),
        (9, "messages", "1 message(s) with empty content"),
        (11, "record", "unrecognized shape with keys ['answer', 'question']"),
    }
    assert all(e.source_file == "tickets.jsonl" for e in outcome.errors)
    assert "tickets.jsonl line 3, record: invalid JSON" in outcome.error_lines()[0]


def test_non_utf8_bytes_and_bom(tmp_path):
    path = tmp_path / "t.jsonl"
    row = json.dumps({"prompt": "a", "completion": "b"}).encode()
    path.write_bytes(b"\xef\xbb\xbf" + row + b"\r\n" + row.replace(b'"a"', b'"\xff"') + b"\n")
    outcome = _validate(path)
    (error,) = outcome.errors
    # Column 13: just after `{"prompt": "`.
    assert error.line == 2 and error.message.startswith("not UTF-8 at column 13: the file looks like")


def test_too_few_and_too_many_examples(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(synthetic.to_jsonl(synthetic.acme_support(5)))
    assert "too few valid examples: 5 (at least 100 required)" in _validate(path, min_examples=100).dataset_errors
    assert "too many examples: 5 (the tenant's tier allows 4)" in _validate(path, max_examples=4).dataset_errors


def test_csv_and_parquet_report_their_own_line_numbers(tmp_path):
    frame = pl.DataFrame({"prompt": ["q1", "q2", "q3"], "completion": ["a1", "", "a3"]})
    frame.write_csv(tmp_path / "d.csv")
    frame.write_parquet(tmp_path / "d.parquet")
    assert [(e.source_file, e.line) for e in _validate(tmp_path / "d.csv").errors] == [("d.csv", 3)]  # header is line 1
    assert [(e.source_file, e.line) for e in _validate(tmp_path / "d.parquet").errors] == [("d.parquet", 2)]


def test_the_split_never_moves_between_versions():
    # Pinned: a tokenized cache is keyed by the dataset digest, so a split that moved would leave caches
    # holding another train split.
    messages = [json.dumps([{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}],
                           separators=(",", ":")) for i in range(40)]
    split = assign_split(pl.DataFrame({"messages": messages + [None]}), 0.2)["split"].to_list()
    assert [i for i, side in enumerate(split) if side == "holdout"] == [0, 9, 12, 25, 26, 37, 39]


def test_split_is_deterministic_and_keeps_duplicates_together(tmp_path):
    path = tmp_path / "t.jsonl"
    rows = [[{"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": f"answer {i}"}]
            for i in range(300)]
    path.write_text(synthetic.to_jsonl(rows + rows[:50]))
    frame = normalize(read_records(path))
    a, b = assign_split(frame, 0.2), assign_split(frame.reverse(), 0.2).reverse()
    assert a["split"].to_list() == b["split"].to_list()
    assert 0.1 < (a["split"] == "holdout").mean() < 0.3
    by_content = a.group_by("messages").agg(pl.col("split").n_unique().alias("sides"))
    assert by_content["sides"].max() == 1
