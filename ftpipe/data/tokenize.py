"""Render examples through the base model's own chat template and tokenize them with the assistant mask.

The mask marks exactly the tokens training learns from (assistant content and its end-of-turn token, except
in assistant messages of weight 0), so the tokenized table is what the trainer consumes as is: ``input_ids``
and ``assistant_masks``. The same pass
yields the pre-flight's statistics: the full rendered length (before truncation), the trainable-token count,
and whether the example teaches the model to stop.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, cast

import polars as pl

if TYPE_CHECKING:
    from polars._typing import PolarsDataType

TOKENIZED_SCHEMA: dict[str, PolarsDataType] = {
    "source_file": pl.String,
    "line": pl.Int64,
    "input_ids": pl.List(pl.Int32),
    "assistant_masks": pl.List(pl.Int8),
    "n_tokens": pl.Int32,
    "n_trainable": pl.Int32,
    "learns_eos": pl.Boolean,
    "truncated": pl.Boolean,
}


class TemplateSpansMismatch(ValueError):
    """The chat template's generation spans cannot be matched to assistant messages one to one."""


def tokenize_messages(tokenizer, messages: list[dict], max_len: int) -> tuple[list[int], list[int], bool]:
    ids, mask = render_and_tokenize(tokenizer, messages)
    return ids[:max_len], mask[:max_len], len(ids) > max_len


def render_and_tokenize(tokenizer, messages: list[dict]) -> tuple[list[int], list[int]]:
    enc = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    return list(enc["input_ids"]), drop_unweighted_turns(list(enc["assistant_masks"]), messages)


def _spans(mask: list[int]) -> list[tuple[int, int]]:
    spans, start = [], None
    for i, bit in enumerate([*mask, 0]):
        if bit and start is None:
            start = i
        elif not bit and start is not None:
            spans.append((start, i))
            start = None
    return spans


def drop_unweighted_turns(mask: list[int], messages: list[dict]) -> list[int]:
    """Unmask the assistant turns the tenant gave ``weight: 0``: they stay in the context, nothing is learned
    from them. The template marks each assistant message as one generation span, in order; a template that
    does otherwise cannot say which tokens belong to which message, and that is an error, not a guess."""
    # Only an explicit 0 unlearns a turn: a missing or null weight (Parquet writes null for it) is the default.
    learned = [m.get("weight") != 0 for m in messages if m.get("role") == "assistant"]
    if all(learned):
        return mask
    spans = _spans(mask)
    if len(spans) != len(learned):
        raise TemplateSpansMismatch(
            f"the chat template marks {len(spans)} generation span(s) for {len(learned)} assistant message(s); "
            "per-message weights need one span per assistant message")
    out = list(mask)
    for (start, end), keep in zip(spans, learned):
        if not keep:
            out[start:end] = [0] * (end - start)
    return out


BATCH = 1024


def render_conversations(tokenizer, conversations: list[list[dict]], tools: list[str | None] | None = None,
                         ) -> tuple[list[str], list[list[tuple[int, int]]]]:
    """The chat template rendered exactly as ``apply_chat_template`` renders it (transformers' own renderer, the
    same keyword arguments, messages without their None values), with each conversation's generation spans
    as character offsets. ``tools``: each conversation's tools as JSON (None: none); the renderer takes one
    list of tools per call, so conversations are rendered in groups that share theirs."""
    from transformers.utils.chat_template_utils import render_jinja_template

    conversations = [[{k: v for k, v in m.items() if v is not None} for m in c] for c in conversations]
    groups: dict[str | None, list[int]] = {}
    for i, spec in enumerate(tools or [None] * len(conversations)):
        groups.setdefault(spec, []).append(i)
    rendered: list = [None] * len(conversations)
    spans: list = [None] * len(conversations)
    for spec, members in groups.items():
        # transformers annotates render_jinja_template -> str; it returns (texts, generation spans)
        texts, offsets = render_jinja_template(  # type: ignore[str-unpack]
            conversations=[conversations[i] for i in members], tools=json.loads(spec) if spec else None,
            chat_template=tokenizer.get_chat_template(), return_assistant_tokens_mask=True,
            **tokenizer.special_tokens_map)
        for i, text, span in zip(members, texts, offsets):
            rendered[i], spans[i] = text, span
    return rendered, spans


_PROBE_TOOLS = [{"type": "function", "function": {"name": "ftpipe_probe_tool", "parameters": {"type": "object"}}}]
_PROBE_CONVERSATION = [
    {"role": "user", "content": "q"},
    {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "ftpipe_probe_call",
                                                                           "arguments": {"ftpipe_probe_arg": 1}}}]},
    {"role": "tool", "content": "r"},
    {"role": "assistant", "content": "a"},
]


def renders_tools(tokenizer) -> bool:
    """Whether the chat template shows the model a conversation's tools and its tool calls. Many templates ignore
    both without an error: training on such a rendering would teach answers to calls the model never saw."""
    from jinja2.exceptions import TemplateError

    try:
        text = tokenizer.apply_chat_template(_PROBE_CONVERSATION, tools=_PROBE_TOOLS, tokenize=False)
    except (TemplateError, ValueError, TypeError):
        return False
    return all(name in text for name in ("ftpipe_probe_tool", "ftpipe_probe_call", "ftpipe_probe_arg"))


def _assistant_mask(encoding, spans: list[tuple[int, int]]) -> list[int]:
    """Tokens whose characters lie in a generation span: ``apply_chat_template``'s own rule, on one encoding."""
    mask = [0] * len(encoding)
    for start_char, end_char in spans:
        start, end = encoding.char_to_token(start_char), encoding.char_to_token(end_char - 1)
        if start is None:
            break
        mask[start:end + 1 if end else len(mask)] = [1] * ((end + 1 if end else len(mask)) - start)
    return mask


def _ids_and_masks(encodings, spans, conversations) -> tuple[list[list[int]], list[list[int]]]:
    return ([e.ids for e in encodings],
            [drop_unweighted_turns(_assistant_mask(e, s), c) for e, s, c in zip(encodings, spans, conversations)])


def _batches(tokenizer, frame: pl.DataFrame):
    """(ids, masks) per batch of ``BATCH`` examples. The Rust tokenizer encodes one batch in a thread of its
    own (it releases the GIL) while Python renders the next: the template costs about half the encoding,
    and this way it hides behind it instead of adding to it."""
    from concurrent.futures import ThreadPoolExecutor

    backend = tokenizer.backend_tokenizer
    with ThreadPoolExecutor(max_workers=1) as encoder:
        pending = None
        for start in range(0, frame.height, BATCH):
            conversations = [json.loads(m) for m in frame["messages"].slice(start, BATCH)]
            tools = frame["tools"].slice(start, BATCH).to_list() if "tools" in frame.columns else None
            rendered, spans = render_conversations(tokenizer, conversations, tools)
            encoding = encoder.submit(backend.encode_batch, rendered, add_special_tokens=False)
            if pending:
                yield _ids_and_masks(pending[0].result(), *pending[1:])
            pending = (encoding, spans, conversations)
        if pending:
            yield _ids_and_masks(pending[0].result(), *pending[1:])


def _list_column(lists: list[list[int]], dtype) -> pl.Series:
    import pyarrow as pa

    # polars types from_arrow as DataFrame | Series (it cannot tell pyarrow's types apart): an Array gives a Series
    series = cast(pl.Series, pl.from_arrow(pa.array(lists, type=pa.list_(pa.int32()))))
    return series.cast(dtype)


def _truncated(lists: list[list[int]], max_len: int) -> list[list[int]]:
    return [x if len(x) <= max_len else x[:max_len] for x in lists]


def tokenize_frame(tokenizer, frame: pl.DataFrame, max_len: int, progress=None) -> pl.DataFrame:
    """Tokenize every example; ``progress(done, total)`` is called after each batch."""
    parts, done = [], 0
    for ids_batch, mask_batch in _batches(tokenizer, frame):
        # Converted batch by batch, while the next batch encodes, rather than all at the end.
        parts.append(pl.DataFrame({
            "input_ids": _list_column(_truncated(ids_batch, max_len), pl.List(pl.Int32)),
            "assistant_masks": _list_column(_truncated(mask_batch, max_len), pl.List(pl.Int8)),
            "n_tokens": pl.Series([len(ids) for ids in ids_batch], dtype=pl.Int32),
        }))
        done += len(ids_batch)
        if progress:
            progress(done, frame.height)
    tokens = pl.concat(parts) if parts else pl.DataFrame(schema={k: TOKENIZED_SCHEMA[k] for k in
                                                                 ("input_ids", "assistant_masks", "n_tokens")})
    table = frame.select("source_file", "line").hstack(tokens)
    eos = tokenizer.eos_token_id
    # An EOS token counts only where the mask says it is learned: a 2 in eos_and_mask is exactly that.
    eos_and_mask = pl.col("input_ids").list.eval((pl.element() == eos).cast(pl.Int8)) + pl.col("assistant_masks")
    # The ignore: polars types cast's argument as a Mapping keyed by name, selector or dtype, and a Mapping's key
    # type is invariant, so no dict[str, ...] schema fits it although a dict by name is what cast takes.
    return table.with_columns(
        pl.col("assistant_masks").list.sum().cast(pl.Int32).alias("n_trainable"),
        (eos_and_mask.list.max() == 2).fill_null(False).alias("learns_eos"),
        (pl.col("n_tokens") > max_len).alias("truncated"),
    ).select(list(TOKENIZED_SCHEMA)).cast(TOKENIZED_SCHEMA)  # type: ignore[arg-type]


PREFERENCE_SCHEMA: dict[str, PolarsDataType] = {
    "source_file": pl.String,
    "line": pl.Int64,
    "prompt_ids": pl.List(pl.Int32),
    "chosen_ids": pl.List(pl.Int32),
    "rejected_ids": pl.List(pl.Int32),
    "n_tokens": pl.Int32,
    "n_trainable": pl.Int32,
    "learns_eos": pl.Boolean,
    "truncated": pl.Boolean,
}


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def tokenize_preferences(tokenizer, frame: pl.DataFrame, max_len: int, progress=None) -> pl.DataFrame:
    """Preference pairs for DPO: the prompt rendered with the generation prompt, and the tokens of each
    completion that follow it in the full rendering (so they end with the template's end-of-turn).

    ``frame`` has ``prompt``, ``chosen`` and ``rejected`` columns of JSON message lists. ``n_tokens`` is the
    longer of the two full sequences; ``truncated`` says it exceeds ``max_len``; ``n_trainable`` counts both
    answers' tokens and ``learns_eos`` says the chosen answer ends with the EOS token.
    """
    out: dict[str, list] = {"prompt_ids": [], "chosen_ids": [], "rejected_ids": [], "n_tokens": []}
    for start in range(0, frame.height, BATCH):
        batch = frame.slice(start, BATCH)
        prompts = [json.loads(p) for p in batch["prompt"]]
        prompt_ids = tokenizer.apply_chat_template(prompts, tokenize=True, add_generation_prompt=True,
                                                   return_dict=True)["input_ids"]
        full = {}
        for side in ("chosen", "rejected"):
            conversations = [p + json.loads(c) for p, c in zip(prompts, batch[side])]
            full[side] = tokenizer.apply_chat_template(conversations, tokenize=True, return_dict=True)["input_ids"]
        for p, c, r in zip(prompt_ids, full["chosen"], full["rejected"]):
            # The template may render the generation prompt differently from the start of a turn; TRL takes
            # the common prefix of the three renderings as the prompt, and so does this.
            n = min(len(p), _common_prefix(p, c), _common_prefix(p, r))
            out["prompt_ids"].append(p[:n])
            out["chosen_ids"].append(c[n:])
            out["rejected_ids"].append(r[n:])
            out["n_tokens"].append(max(len(c), len(r)))
        if progress:
            progress(min(start + BATCH, frame.height), frame.height)
    eos = tokenizer.eos_token_id
    return pl.DataFrame({
        "source_file": frame["source_file"], "line": frame["line"],
        **{k: pl.Series(v, dtype=PREFERENCE_SCHEMA[k]) for k, v in out.items()},
    }).with_columns(
        (pl.col("chosen_ids").list.len() + pl.col("rejected_ids").list.len()).cast(pl.Int32).alias("n_trainable"),
        (pl.col("chosen_ids").list.last() == eos).fill_null(False).alias("learns_eos"),
        (pl.col("n_tokens") > max_len).alias("truncated"),
    ).select(list(PREFERENCE_SCHEMA))


def preference_pairs(examples: pl.DataFrame) -> pl.DataFrame:
    """Normalized preference rows (``messages`` = prompt + chosen, ``n_prompt``, ``rejected``) as prompt /
    chosen / rejected JSON columns."""
    prompts, chosen = [], []
    for messages, n_prompt in examples.select("messages", "n_prompt").iter_rows():
        parsed = json.loads(messages)
        prompts.append(json.dumps(parsed[:n_prompt], ensure_ascii=False))
        chosen.append(json.dumps(parsed[n_prompt:], ensure_ascii=False))
    return examples.select("source_file", "line", "rejected").with_columns(
        pl.Series("prompt", prompts, dtype=pl.String), pl.Series("chosen", chosen, dtype=pl.String))


def tokenize_examples(tokenizer, examples: pl.DataFrame, max_len: int, objective: str, progress=None) -> pl.DataFrame:
    """The tokenized cache of a training split: chat sequences with masks for SFT, pairs for DPO."""
    if objective == "dpo":
        return tokenize_preferences(tokenizer, preference_pairs(examples), max_len, progress)
    return tokenize_frame(tokenizer, examples, max_len, progress=progress)
