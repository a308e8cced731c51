"""Vectorized normalization of a chunk of JSONL lines with polars expressions.

Clean data is the common case, so a chunk is first decoded and checked as a whole; this runs at close to the
speed of a bare ``polars.read_ndjson``. Any chunk that is not clean (a line that is not JSON, unknown or
missing keys, mixed shapes, unexpected types) returns None and goes through the exact per-line path
(``ftpipe.data.read`` + ``ftpipe.data.normalize``), which names every bad line. Both paths produce the same
rows, byte for byte (``tests/test_fast_normalize.py``).
"""

from __future__ import annotations

import polars as pl

from ftpipe.data.messages import ROLES, SHAREGPT_ROLES
from ftpipe.data.normalize import NORMALIZED_SCHEMA, SHAPES
from ftpipe.data.read import MAX_NESTING, MAX_RECORD_BYTES, too_deep

# polars unifies a chunk's types and would turn a number into a string, so a text field written with any other
# JSON type (number, bool, null, object, array) sends the chunk to the exact path. A false match only costs
# speed: the exact path is always right.
_NON_STRING_FIELD = (r'(?:^|[^\\])"(?:role|content|prompt|completion|system|instruction|input|response|output|text'
                     r'|from|value)"\s*:\s*[^"\s]')


# A key written with an escaped letter ("compl\u0065tion") is the same key to polars but not to the pattern
# above: such lines take the exact path too (no common encoder escapes a lowercase letter).
_ESCAPED_ASCII = r"\\u00(?:6[1-9a-fA-F]|7[0-9aA]|5[fF])"  # a-z and _, the letters of every key read here
_ANY_KEY = r'(?:^|[^\\])"(?:[^"\\]|\\.)*"\s*:'
"""A JSON key: a string followed by a colon (a string not preceded by a backslash, which would be inside one)."""
_PY_WHITESPACE = "".join(c for c in map(chr, range(0x3001)) if c.isspace())
"""What ``str.strip()`` removes, for the empty-content count: polars' default set lacks \\x1c-\\x1f."""

_HIGH_SURROGATE = r"\\u[dD][89abAB][0-9a-fA-F]{2}"
_SURROGATE_PAIR = _HIGH_SURROGATE + r"\\u[dD][c-fC-F][0-9a-fA-F]{2}"


def _beyond_polars(raw: pl.Series) -> bool:
    """Lines that polars would read differently from the exact path, or not survive. Everything else hostile
    (NaN, Infinity, numbers out of range, a lone low surrogate, control characters, duplicate keys, trailing
    text) already makes ``json_decode`` fail, which sends the chunk to the exact path too."""
    # polars types max() as any literal or None; of byte lengths of non-null lines (at least one) it is an int
    if raw.str.len_bytes().max() > MAX_RECORD_BYTES:  # type: ignore[operator]
        return True
    # A lone high surrogate ("\ud800") decodes to NUL in polars; the exact path refuses it. Every high half must
    # open a pair (a false alarm, e.g. an escaped backslash before "ud800", only costs speed).
    escaped = raw.filter(raw.str.contains(_HIGH_SURROGATE))
    if len(escaped) and (escaped.str.count_matches(_HIGH_SURROGATE)
                         != escaped.str.count_matches(_SURROGATE_PAIR)).any():
        return True
    # polars recurses per level of nesting (a RecursionError at 1,000): the bracket count settles almost every
    # line, and the few with many brackets get the exact scan.
    crowded = raw.filter(raw.str.count_matches(r"[\[{]") > MAX_NESTING)
    return any(too_deep(line) for line in crowded)


def _repeated_keys(raw: pl.Series, data: pl.DataFrame) -> bool:
    """Whether a line has more keys than its decoded values: a key written twice in one object, whose value
    polars takes from the first and Python's json from the last (the exact path refuses it by name). Every
    value here is a string or a list of message objects (anything else took the exact path), so each key
    present decodes to a non-null value."""
    expected = pl.Series([0] * data.height, dtype=pl.Int64)
    for name in data.columns:
        column = data[name]
        expected += column.is_not_null().cast(pl.Int64)
        if isinstance(column.dtype, pl.List) and isinstance(column.dtype.inner, pl.Struct):
            for field in column.dtype.inner.fields:
                expected += column.list.eval(pl.element().struct.field(field.name).is_not_null()).list.sum() \
                    .fill_null(0).cast(pl.Int64)
        elif column.dtype != pl.String:
            return True  # an object or a list of another kind (metadata, say): not counted here
    return bool((raw.str.count_matches(_ANY_KEY).cast(pl.Int64) != expected).any())


def _shape_of(fields: set[str]) -> str | None:
    """The one shape whose keys cover exactly these fields (every row has the same keys when it is clean)."""
    for shape, (required, optional) in SHAPES.items():
        if required <= fields <= required | optional:
            return shape
    return None


def _message(role: str, content: pl.Expr) -> pl.Expr:
    return pl.struct(pl.lit(role).alias("role"), content.alias("content"))


def _messages_expr(shape: str, dtype: pl.Struct) -> pl.Expr | None:
    fields = {f.name: f.dtype for f in dtype.fields}
    if shape == "chat":
        inner = fields["messages"]
        if not isinstance(inner, pl.List) or not isinstance(inner.inner, pl.Struct):
            return None
        keys = {f.name: f.dtype for f in inner.inner.fields}
        # Per-message weights, tool calls and tools are rare and need checking message by message, and content
        # parts are lists: the exact path does those.
        if keys.get("role") != pl.String or keys.get("content") != pl.String or set(keys) - {"role", "content"} \
                or {"tools", "functions"} & set(fields):
            return None
        return pl.col("messages").list.eval(pl.struct(pl.element().struct.field("role"),
                                                      pl.element().struct.field("content")))
    if shape == "prompt_completion":
        if any(fields.get(k, pl.String) != pl.String for k in ("prompt", "completion", "system")):
            return None
        return _with_system(fields, [_message("user", pl.col("prompt")), _message("assistant", pl.col("completion"))])
    if shape in ("instruction", "alpaca"):
        answer = "response" if shape == "instruction" else "output"
        if "history" in fields or any(fields.get(k, pl.String) != pl.String
                                      for k in ("instruction", "input", answer, "system")):
            return None
        prompt = pl.col("instruction")
        if "input" in fields:
            has_input = pl.col("input").is_not_null() & (pl.col("input") != "")
            prompt = pl.when(has_input).then(prompt + "\n\n" + pl.col("input")).otherwise(prompt)
        return _with_system(fields, [_message("user", prompt), _message("assistant", pl.col(answer))])
    if shape == "sharegpt":
        inner = fields["conversations"]
        if "tools" in fields or fields.get("system", pl.String) != pl.String or not isinstance(inner, pl.List) \
                or not isinstance(inner.inner, pl.Struct):
            return None
        keys = {f.name: f.dtype for f in inner.inner.fields}
        role, content = ("from", "value") if set(keys) == {"from", "value"} else ("role", "content")
        # Only the plain speakers: a function_call turn is a tool call to parse, and the exact path does that.
        speakers = {k: v for k, v in SHAREGPT_ROLES.items() if k != "function_call"}
        if set(keys) != {role, content} or keys[role] != pl.String or keys[content] != pl.String:
            return None
        turns = pl.col("conversations").list.eval(pl.struct(
            pl.element().struct.field(role).replace_strict(speakers, default=None).alias("role"),
            pl.element().struct.field(content).alias("content")))
        return _with_system(fields, turns)
    return None  # other shapes take the exact path


def _with_system(fields: dict, body: pl.Expr | list[pl.Expr]) -> pl.Expr:
    """``body`` (a list of messages, or the messages to make one of) after the record's system message, when it
    has a non-empty one, as the exact path puts it."""
    body = pl.concat_list(body) if isinstance(body, list) else body
    if "system" not in fields:
        return body
    has_system = pl.col("system").is_not_null() & (pl.col("system") != "")
    return pl.when(has_system).then(pl.concat_list([_message("system", pl.col("system")), body])).otherwise(body)


def normalize_lines_fast(lines: pl.Series, first_line: int, source_file: str) -> pl.DataFrame | None:
    frame = pl.DataFrame({"line": pl.int_range(first_line, first_line + len(lines), eager=True, dtype=pl.Int64),
                          "raw": lines.str.strip_suffix("\r")})
    frame = frame.filter(pl.col("raw").str.strip_chars() != "")
    if frame.is_empty():
        return frame.select(**{k: pl.lit(None, dtype=v) for k, v in NORMALIZED_SCHEMA.items()}).clear()
    if _beyond_polars(frame["raw"]) or frame["raw"].str.contains(_NON_STRING_FIELD).any() \
            or frame["raw"].str.contains(_ESCAPED_ASCII).any():
        return None
    try:
        decoded = frame["raw"].str.json_decode(infer_schema_length=None)
    except pl.exceptions.PolarsError:
        return None
    if not isinstance(decoded.dtype, pl.Struct) or decoded.null_count():
        return None
    data = decoded.struct.unnest()
    shape = _shape_of(set(data.columns))
    required = SHAPES[shape][0] if shape else set()
    if shape is None or any(data[k].null_count() for k in required):
        return None
    messages = _messages_expr(shape, decoded.dtype)
    if messages is None or _repeated_keys(frame["raw"], data):
        return None

    conversation = {"chat": "messages", "sharegpt": "conversations"}.get(shape)
    if conversation and data[conversation].list.eval(pl.element().is_null()).list.any().any():
        return None  # a message that is null, not an object: the exact path names it
    m = data.select(messages.alias("m"))["m"]
    if not m.list.eval(pl.element().struct.field("role").is_in(list(ROLES)).fill_null(False)).list.all().all():
        return None  # an unknown or missing role: the exact path names it and suggests the likely one
    roles = pl.col("m").list.eval(pl.element().struct.field("role"))
    body = pl.when(roles.list.first() == "system").then(roles.list.slice(1)).otherwise(roles)
    content = pl.element().struct.field("content")
    out = pl.DataFrame({"line": frame["line"], "m": m}).select(
        pl.lit(source_file).alias("source_file"),
        pl.col("line"),
        pl.lit(shape).alias("shape"),
        pl.lit(None, dtype=pl.String).alias("problem"),
        pl.lit(None, dtype=pl.String).alias("unknown_keys"),
        ("[" + pl.col("m").list.eval(pl.element().struct.json_encode()).list.join(",") + "]").alias("messages"),
        pl.col("m").list.len().cast(pl.Int64).alias("n_messages"),
        roles.list.eval(pl.element() == "assistant").list.sum().cast(pl.Int64).alias("n_assistant"),
        pl.col("m").list.eval(content.is_null() | (content.str.strip_chars(_PY_WHITESPACE) == "")).list.sum()
        .cast(pl.Int64)
        .alias("n_empty"),
        roles.list.eval(pl.element().is_null() | ~pl.element().is_in(list(ROLES))).list.sum().cast(pl.Int64)
        .alias("n_bad_role"),
        ((body.list.len() > 0) & ~body.list.contains("system")
         & (((body.list.len() == 1) & (body.list.first() == "assistant"))
            | ((body.list.first() == "user") & (body.list.last() == "assistant")))).fill_null(False)
        .alias("roles_in_order"),
    )
    # The ignore: polars types cast's argument as a Mapping keyed by name, selector or dtype, and a Mapping's key
    # type is invariant, so no dict[str, ...] schema fits it although a dict by name is what cast takes.
    return out.with_columns(pl.lit(None).alias(c) for c in NORMALIZED_SCHEMA if c not in out.columns) \
        .select(list(NORMALIZED_SCHEMA)).cast(NORMALIZED_SCHEMA)  # type: ignore[arg-type]
