"""Per-message ``weight`` on chat data: an assistant message of weight 0 stays in the context and is not learned."""

import json

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ftpipe.data.fast_normalize import normalize_lines_fast
from ftpipe.data.normalize import normalize
from ftpipe.data.pipeline import validate_to_parquet
from ftpipe.data.preflight import run_preflight
from ftpipe.data.read import read_records
from ftpipe.data.tokenize import TemplateSpansMismatch, drop_unweighted_turns, tokenize_frame
from ftpipe.evaluation.holdout_task import holdout_docs
from ftpipe.tenants import PoolConfig

TWO_TURNS = [
    {"role": "user", "content": "What is two plus two?"},
    {"role": "assistant", "content": "Five.", "weight": 0},
    {"role": "user", "content": "Are you sure?"},
    {"role": "assistant", "content": "Sorry: two plus two is four."},
]


def _normalized(tmp_path, conversations: list[list[dict]]) -> pl.DataFrame:
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"messages": c}) + "\n" for c in conversations))
    return normalize(read_records(path))


def test_a_weight_zero_turn_is_context_and_only_the_weighted_turn_is_learned(tmp_path, tokenizer):
    frame = _normalized(tmp_path, [TWO_TURNS])
    assert frame["weight_problem"].to_list() == [None]
    table = tokenize_frame(tokenizer, frame, max_len=512)
    ids, mask = table["input_ids"][0].to_list(), table["assistant_masks"][0].to_list()
    assert tokenizer.decode([i for i, m in zip(ids, mask) if m]) == "Sorry: two plus two is four.<|end|>"
    assert "Five." in tokenizer.decode(ids)  # still in the context
    unweighted = tokenize_frame(tokenizer, _normalized(tmp_path, [[{k: v for k, v in m.items() if k != "weight"}
                                                                     for m in TWO_TURNS]]), max_len=512)
    assert unweighted["input_ids"][0].to_list() == ids
    assert unweighted["n_trainable"][0] > table["n_trainable"][0] > 0


def test_weight_one_is_the_default_and_splits_like_no_weight(tmp_path):
    plain = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]
    weighted = [plain[0], {**plain[1], "weight": 1}]
    frame = _normalized(tmp_path, [plain, weighted])
    assert frame["messages"][0] == frame["messages"][1]  # same content hash, same split side
    assert '"weight":0' in _normalized(tmp_path, [TWO_TURNS])["messages"][0]


def test_an_example_whose_every_answer_has_weight_zero_warns_that_nothing_is_learned(tmp_path, tokenizer):
    silent = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello.", "weight": 0}]
    frame = _normalized(tmp_path, [TWO_TURNS, silent])
    table = tokenize_frame(tokenizer, frame, max_len=512)
    assert table["n_trainable"][1] == 0
    preflight = run_preflight(table, 512, 1, 1_000_000, "cpu", PoolConfig(gpu="cpu", gpu_memory_gb=8, peak_tflops=0.05))
    (warning,) = [w for w in preflight.warnings if w.kind == "empty_label_mask"]
    assert warning.count == 1 and warning.locations == ["t.jsonl line 2"]


def test_the_fast_reader_leaves_weighted_chunks_to_the_exact_path():
    lines = pl.Series([json.dumps({"messages": TWO_TURNS})])
    assert normalize_lines_fast(lines, 1, "t.jsonl") is None
    plain = pl.Series([json.dumps({"messages": [TWO_TURNS[0], {"role": "assistant", "content": "Four."}]})])
    assert normalize_lines_fast(plain, 1, "t.jsonl") is not None


def test_a_held_out_example_is_scored_on_its_last_weighted_answer():
    (doc,) = holdout_docs([TWO_TURNS, [TWO_TURNS[0], TWO_TURNS[1]]])
    assert doc["target"] == "Sorry: two plus two is four." and doc["prompt"] == "Are you sure?"


def test_spans_that_do_not_match_the_assistant_messages_are_an_error_not_a_guess():
    assert drop_unweighted_turns([0, 1, 1, 0, 1, 0], TWO_TURNS) == [0, 0, 0, 0, 1, 0]
    with pytest.raises(TemplateSpansMismatch, match="marks 1 generation span"):
        drop_unweighted_turns([0, 1, 1, 1, 1, 0], TWO_TURNS)


def test_a_null_weight_is_no_weight_in_parquet_jsonl_and_csv(tmp_path, tokenizer):
    """A Parquet column of messages has a weight field on every message once one message has a weight, and
    pandas and pyarrow write null on the others: a null weight means none, the default, as in JSON."""
    nulls = [{**m, "weight": m.get("weight")} for m in TWO_TURNS]  # null on three messages, 0 on one
    all_null = [{**m, "weight": None} for m in TWO_TURNS]
    pq.write_table(pa.table({"messages": [nulls, all_null]}), tmp_path / "t.parquet")
    (tmp_path / "t.jsonl").write_text("".join(json.dumps({"messages": c}) + "\n" for c in (nulls, all_null)))
    pl.DataFrame({"messages": [json.dumps(c) for c in (nulls, all_null)]}).write_csv(tmp_path / "t.csv")
    without = [{k: v for k, v in m.items() if k != "weight"} for m in TWO_TURNS]
    expected = _normalized(tmp_path, [TWO_TURNS, without])
    for name in ("t.parquet", "t.jsonl", "t.csv"):
        frame = normalize(read_records(tmp_path / name))
        assert frame["weight_problem"].to_list() == [None, None], name
        assert frame["messages"].to_list() == expected["messages"].to_list(), name
        check = validate_to_parquet({"train": tmp_path / name}, 0.5, tmp_path / "e.parquet", 1, None)
        assert check.outcome.n_row_errors == 0, check.outcome.error_lines()
    table = tokenize_frame(tokenizer, normalize(read_records(tmp_path / "t.parquet")), max_len=512)
    reference = tokenize_frame(tokenizer, expected, max_len=512)
    assert table["n_trainable"].to_list() == reference["n_trainable"].to_list()
    assert table["n_trainable"][1] > table["n_trainable"][0] > 0  # the all-null example learns both answers
