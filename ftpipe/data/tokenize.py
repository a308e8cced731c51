"""Render examples through the base model's own chat template and tokenize them with the assistant mask.

The mask marks exactly the tokens training learns from (assistant content and its end-of-turn token), so the
tokenized table is what the trainer consumes as is: ``input_ids`` and ``assistant_masks``. The same pass
yields the pre-flight's statistics: the full rendered length (before truncation), the trainable-token count,
and whether the example teaches the model to stop.
"""

from __future__ import annotations

import json

import polars as pl

TOKENIZED_SCHEMA = {
    "source_file": pl.String,
    "line": pl.Int64,
    "input_ids": pl.List(pl.Int32),
    "assistant_masks": pl.List(pl.Int8),
    "n_tokens": pl.Int32,
    "n_trainable": pl.Int32,
    "learns_eos": pl.Boolean,
    "truncated": pl.Boolean,
}


def tokenize_messages(tokenizer, messages: list[dict], max_len: int) -> tuple[list[int], list[int], bool]:
    ids, mask = render_and_tokenize(tokenizer, messages)
    return ids[:max_len], mask[:max_len], len(ids) > max_len


def render_and_tokenize(tokenizer, messages: list[dict]) -> tuple[list[int], list[int]]:
    enc = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    return list(enc["input_ids"]), list(enc["assistant_masks"])


def tokenize_frame(tokenizer, frame: pl.DataFrame, max_len: int) -> pl.DataFrame:
    eos = tokenizer.eos_token_id
    rows = []
    for source_file, line, messages in frame.select("source_file", "line", "messages").iter_rows():
        ids, mask = render_and_tokenize(tokenizer, json.loads(messages))
        rows.append({
            "source_file": source_file, "line": line, "input_ids": ids[:max_len], "assistant_masks": mask[:max_len],
            "n_tokens": len(ids), "n_trainable": sum(mask[:max_len]),
            "learns_eos": any(m and i == eos for i, m in zip(ids[:max_len], mask[:max_len])),
            "truncated": len(ids) > max_len,
        })
    return pl.DataFrame(rows, schema=TOKENIZED_SCHEMA)
