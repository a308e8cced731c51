"""The tokenized cache written slice by slice: the same table as tokenizing the train split at once."""

import json

import polars as pl
import pytest

from ftpipe import synthetic
from ftpipe.data.pipeline import tokenize_to_parquet, validate_to_parquet
from ftpipe.data.tokenize import TOKENIZED_SCHEMA, TemplateSpansMismatch, tokenize_frame


def _examples(tmp_path, conversations: list[list[dict]], holdout_fraction: float = 0.1):
    (tmp_path / "t.jsonl").write_text("".join(json.dumps({"messages": c}) + "\n" for c in conversations))
    out = tmp_path / "examples.parquet"
    validate_to_parquet({"train": tmp_path / "t.jsonl"}, holdout_fraction, out, 1, None, chunk_bytes=3_000)
    return out


def test_slices_make_the_same_table_as_the_whole_train_split(tmp_path, tokenizer):
    examples = _examples(tmp_path, synthetic.acme_support(150, seed=5))
    seen = []
    out = tmp_path / "tokenized.parquet"
    written = tokenize_to_parquet(tokenizer, examples, out, 64, "sft", lambda done, total: seen.append((done, total)),
                                  slice_rows=37)
    train = pl.read_parquet(examples).filter(pl.col("split") == "train")
    assert 100 < written == train.height < 150
    assert pl.read_parquet(out).equals(tokenize_frame(tokenizer, train, 64))
    assert len(seen) > 4 and seen[-1] == (written, written)
    assert [done for done, _ in seen] == sorted({done for done, _ in seen})  # rising, never repeated
    assert not list(tmp_path.glob("*.tmp"))


def test_preference_pairs_are_tokenized_slice_by_slice_too(tmp_path, tokenizer):
    from ftpipe.data.tokenize import tokenize_examples

    (tmp_path / "p.jsonl").write_text(synthetic.to_jsonl(synthetic.acme_preferences(60)))
    examples = tmp_path / "examples.parquet"
    assert validate_to_parquet({"train": tmp_path / "p.jsonl"}, 0.1, examples, 1, None, "dpo").outcome.passed
    out = tmp_path / "tokenized.parquet"
    tokenize_to_parquet(tokenizer, examples, out, 128, "dpo", slice_rows=16)
    train = pl.read_parquet(examples).filter(pl.col("split") == "train")
    assert pl.read_parquet(out).equals(tokenize_examples(tokenizer, train, 128, "dpo"))


def test_an_empty_train_split_still_has_the_caches_columns(tmp_path, tokenizer):
    examples = _examples(tmp_path, synthetic.acme_support(3), holdout_fraction=0.0)
    only_holdout = tmp_path / "holdout.parquet"
    pl.read_parquet(examples).with_columns(pl.lit("holdout").alias("split")).write_parquet(only_holdout)
    out = tmp_path / "tokenized.parquet"
    assert tokenize_to_parquet(tokenizer, only_holdout, out, 64, "sft") == 0
    assert pl.read_parquet(out).schema == pl.Schema(TOKENIZED_SCHEMA)


def test_a_failure_midway_leaves_no_cache_file(tmp_path, tiny_model):
    from transformers import AutoTokenizer

    conversations = synthetic.acme_support(120, seed=2)
    conversations[100] = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hm.", "weight": 0},
                          {"role": "user", "content": "Well?"}, {"role": "assistant", "content": "Hello."}]
    examples = _examples(tmp_path, conversations, holdout_fraction=0.0)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model.path)
    # Many hub templates mark no generation spans: per-message weights cannot be honoured with them.
    tokenizer.chat_template = tokenizer.chat_template.replace("{% generation %}", "").replace("{% endgeneration %}", "")
    with pytest.raises(TemplateSpansMismatch, match="marks 0 generation span"):
        tokenize_to_parquet(tokenizer, examples, tmp_path / "tokenized.parquet", 64, "sft", slice_rows=40)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["examples.parquet", "t.jsonl"]


def test_the_preflight_counts_every_long_or_empty_example_but_keeps_the_first(monkeypatch):
    from ftpipe.data import preflight, quality
    from ftpipe.data.pipeline import ExamplesCheck
    from ftpipe.data.report import report_json
    from ftpipe.data.schema import ValidationOutcome
    from ftpipe.tenants import PoolConfig

    monkeypatch.setattr(preflight, "MAX_KEPT_ERRORS", 4)
    monkeypatch.setattr(quality, "MAX_KEPT_LOCATIONS", 3)
    n = 50
    stats = pl.DataFrame({"source_file": "t.jsonl", "line": range(1, n + 1), "n_tokens": [100] * 30 + [10] * 20,
                          "n_trainable": [5] * 40 + [0] * 10, "learns_eos": True})
    result = preflight.run_preflight(stats, 64, 1, 1_000_000, "cpu",
                                     PoolConfig(gpu="cpu", gpu_memory_gb=8, peak_tflops=0.05))
    assert result.n_errors == 30 and not result.passed
    assert [e.line for e in result.errors] == [1, 2, 3, 4]
    (empty,) = result.warnings
    assert empty.count == 10 and empty.locations == ["t.jsonl line 41", "t.jsonl line 42", "t.jsonl line 43"]
    assert empty.more_locations == 7
    report = json.loads(report_json(ExamplesCheck(ValidationOutcome(n)), result))
    assert report["n_row_errors"] == 30 and len(report["errors"]) == 4
