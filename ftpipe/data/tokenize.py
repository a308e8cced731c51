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


BATCH = 1024


def tokenize_conversations(tokenizer, conversations: list[list[dict]]) -> tuple[list[list[int]], list[list[int]]]:
    """A batch through ``apply_chat_template``: the template renders in Python, the tokenizer encodes the
    batch in Rust, and the masks come from the template's generation spans, exactly as for one example."""
    enc = tokenizer.apply_chat_template(conversations, tokenize=True, return_dict=True,
                                        return_assistant_tokens_mask=True)
    return enc["input_ids"], enc["assistant_masks"]


def tokenize_frame(tokenizer, frame: pl.DataFrame, max_len: int, progress=None) -> pl.DataFrame:
    """Tokenize every example; ``progress(done, total)`` is called after each batch."""
    all_ids, all_masks, lengths = [], [], []
    total = frame.height
    for start in range(0, total, BATCH):
        messages = frame["messages"].slice(start, BATCH)
        ids_batch, mask_batch = tokenize_conversations(tokenizer, [json.loads(m) for m in messages])
        lengths += [len(ids) for ids in ids_batch]
        all_ids += [ids[:max_len] for ids in ids_batch]
        all_masks += [mask[:max_len] for mask in mask_batch]
        if progress:
            progress(min(start + BATCH, total), total)
    table = pl.DataFrame({
        "source_file": frame["source_file"], "line": frame["line"],
        "input_ids": pl.Series(all_ids, dtype=pl.List(pl.Int32)),
        "assistant_masks": pl.Series(all_masks, dtype=pl.List(pl.Int8)),
        "n_tokens": pl.Series(lengths, dtype=pl.Int32),
    })
    eos = tokenizer.eos_token_id
    # An EOS token counts only where the mask says it is learned: a 2 in eos_and_mask is exactly that.
    eos_and_mask = pl.col("input_ids").list.eval((pl.element() == eos).cast(pl.Int8)) + pl.col("assistant_masks")
    return table.with_columns(
        pl.col("assistant_masks").list.sum().cast(pl.Int32).alias("n_trainable"),
        (eos_and_mask.list.max() == 2).fill_null(False).alias("learns_eos"),
        (pl.col("n_tokens") > max_len).alias("truncated"),
    ).select(list(TOKENIZED_SCHEMA)).cast(TOKENIZED_SCHEMA)
