"""Render examples through the base model's own chat template and tokenize them with the assistant mask.

The mask marks exactly the tokens training learns from (assistant content and its end-of-turn token), so the
tokenized table is what the trainer consumes as is: ``input_ids`` and ``assistant_masks``.
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
    "truncated": pl.Boolean,
}


def tokenize_messages(tokenizer, messages: list[dict], max_len: int) -> tuple[list[int], list[int], bool]:
    enc = tokenizer.apply_chat_template(
        messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    ids, mask = list(enc["input_ids"]), list(enc["assistant_masks"])
    truncated = len(ids) > max_len
    return ids[:max_len], mask[:max_len], truncated


def tokenize_frame(tokenizer, frame: pl.DataFrame, max_len: int) -> pl.DataFrame:
    rows = []
    for source_file, line, messages in frame.select("source_file", "line", "messages").iter_rows():
        ids, mask, truncated = tokenize_messages(tokenizer, json.loads(messages), max_len)
        rows.append({
            "source_file": source_file, "line": line, "input_ids": ids, "assistant_masks": mask,
            "n_tokens": len(ids), "n_trainable": sum(mask), "truncated": truncated,
        })
    return pl.DataFrame(rows, schema=TOKENIZED_SCHEMA)
