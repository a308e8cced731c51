"""Detect each record's shape and normalize it into one chat-message schema.

Every example becomes a list of ``{"role", "content"}`` messages; a chat assistant message that the tenant gave
``"weight": 0`` keeps it (shown to the model, not learned). Derived columns describe what the pandera model
checks (``ftpipe.data.schema``), so that validation is a declarative schema, not scattered ifs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

import polars as pl

from ftpipe.data.preference import PREFERENCE_SHAPES, PairProblem, pair_message_lists, pair_problem, to_pair
from ftpipe.data.read import RawRecord

ROLES = ("system", "user", "assistant", "tool")

SHAPES: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    # shape: (required keys, optional keys)
    "chat": (frozenset({"messages"}), frozenset({"id", "metadata"})),
    "prompt_completion": (frozenset({"prompt", "completion"}), frozenset({"id", "metadata", "system"})),
    "instruction": (frozenset({"instruction", "response"}), frozenset({"input", "id", "metadata", "system"})),
    "text": (frozenset({"text"}), frozenset({"id", "metadata"})),
    "preference": (frozenset({"prompt", "chosen", "rejected"}), frozenset({"id", "metadata", "system"})),
    "preference_api": (frozenset({"input", "preferred_output", "non_preferred_output"}),
                       frozenset({"id", "metadata"})),
}

NORMALIZED_SCHEMA = {
    "source_file": pl.String,
    "line": pl.Int64,
    "shape": pl.String,
    "problem": pl.String,
    # "field: message" when one field is at fault: a value of the wrong type, or a record-level problem inside
    # one field (an unpaired surrogate, an over-long cell).
    "field_problem": pl.String,
    "unknown_keys": pl.String,
    "messages": pl.String,
    "n_messages": pl.Int64,
    "n_assistant": pl.Int64,
    "n_empty": pl.Int64,
    "n_bad_role": pl.Int64,
    "roles_in_order": pl.Boolean,
    "weight_problem": pl.String,
    # Preference pairs only (null otherwise): ``messages`` is the prompt and the chosen answer, so that every
    # chat check and data-quality warning applies to them; these hold the rest of the pair.
    "n_prompt": pl.Int64,
    "rejected": pl.String,
    "pair_problem": pl.String,
}


def detect_shape(data: dict) -> str | None:
    keys = set(data)
    # The most specific shape first: a preference pair also has a "prompt".
    for shape, (required, _) in sorted(SHAPES.items(), key=lambda item: -len(item[1][0])):
        if required <= keys:
            return shape
    return None


def to_messages(shape: str, data: dict) -> list[dict]:
    if shape == "chat":
        return data["messages"]
    if shape == "prompt_completion":
        system = [{"role": "system", "content": data["system"]}] if data.get("system") else []
        return system + [{"role": "user", "content": data["prompt"]}, {"role": "assistant", "content": data["completion"]}]
    if shape == "instruction":
        prompt = data["instruction"] + (f"\n\n{data['input']}" if data.get("input") else "")
        system = [{"role": "system", "content": data["system"]}] if data.get("system") else []
        return system + [{"role": "user", "content": prompt}, {"role": "assistant", "content": data["response"]}]
    if shape == "text":
        return [{"role": "assistant", "content": data["text"]}]
    raise ValueError(shape)


CONTENT_PARTS_REFUSAL = ("content must be a string; content parts (a list) are not supported yet: join the text "
                         "parts into one string")
"""OpenAI's content parts (``[{"type": "text", "text": "..."}]``) are refused here, and only here, until the chat
template rendering reads them."""

_KINDS = {type(None): "null", bool: "bool", int: "int", float: "float", str: "string", list: "list", dict: "object",
          bytes: "bytes"}


def kind_of(value) -> str:
    """A value's type as a tenant would call it (Parquet values are Python's dates, decimals, ...)."""
    return _KINDS.get(type(value), type(value).__name__)


def _not_text(value, field: str) -> tuple[str, str] | None:
    return None if isinstance(value, str) else (field, f"expected a string, got {kind_of(value)}")


def messages_problem(messages, field: str = "messages") -> tuple[str, str] | None:
    """(field, message) for the first value of the wrong type in a list of messages. A missing role or content is
    not one: the schema reports those as an unrecognized role or empty content."""
    if not isinstance(messages, list):
        return field, f"expected a list of messages, got {kind_of(messages)}"
    for i, m in enumerate(messages):
        where = f"{field}[{i}]"
        if not isinstance(m, dict):
            return where, f"expected a message (an object with 'role' and 'content'), got {kind_of(m)}"
        if "role" in m and (bad := _not_text(m["role"], f"{where}.role")):
            return bad
        if isinstance(m.get("content"), list):
            return f"{where}.content", CONTENT_PARTS_REFUSAL
        if "content" in m and (bad := _not_text(m["content"], f"{where}.content")):
            return bad
    return None


# Per shape: the fields that hold text, required and optional (an optional one may be null: as if absent).
_TEXT_FIELDS = {
    "prompt_completion": (("prompt", "completion"), ("system",)),
    "instruction": (("instruction", "response"), ("input", "system")),
    "text": (("text",), ()),
    "preference": ((), ("system",)),
}


def field_problem(shape: str, data: dict) -> tuple[str, str] | None:
    """(field, message) for the first field of the shape holding a value of the wrong type: a number, a list or
    an object where text belongs is named, not read as empty content."""
    required, optional = _TEXT_FIELDS.get(shape, ((), ()))
    for name in required:
        if bad := _not_text(data[name], name):
            return bad
    for name in optional:
        if data.get(name) is not None and (bad := _not_text(data[name], name)):
            return bad
    lists = [("messages", data["messages"])] if shape == "chat" else \
        pair_message_lists(shape, data) if shape in PREFERENCE_SHAPES else []
    for name, messages in lists:
        if bad := messages_problem(messages, name):
            return bad
    return None


def _shown(value, limit: int = 40) -> str:
    """A tenant's value quoted in a message: JSON where it is JSON, short whatever its size."""
    text = json.dumps(value, default=str)
    return text if len(text) <= limit else text[:limit] + "..."


def _names(keys, limit: int = 20) -> list[str]:
    """Keys for a message, a bounded number of them, each shortened: a record may have thousands of keys, and a
    key may be a megabyte long."""
    shown = [k if len(k) <= 60 else k[:60] + "..." for k in sorted(keys)[:limit]]
    return shown + ([f"... and {len(keys) - limit} more"] if len(keys) > limit else [])


def _compact(messages: list[dict], keep_weights: bool = False) -> str:
    # Compact separators: byte-identical to the vectorized path (fast_normalize), so split hashes agree. Only a
    # weight of 0 is kept: weight 1 is the default, so the same example with or without it splits the same way.
    def compact(m: dict) -> dict:
        out = {"role": m.get("role"), "content": m.get("content")}
        if keep_weights and m.get("weight", 1) == 0:
            out["weight"] = 0
        return out

    return json.dumps([compact(m) for m in messages], ensure_ascii=False, separators=(",", ":"))


def weight_problem(messages: list[dict]) -> str | None:
    """Per-message weights, as in OpenAI's chat fine-tuning format: 0 or 1, on assistant messages only. A null
    weight is no weight: a Parquet column of messages has a weight field on every message once one has it, and
    pandas and pyarrow write null on the others."""
    for i, m in enumerate(messages):
        weight = m.get("weight")
        if weight is None:
            continue
        if isinstance(weight, bool) or not isinstance(weight, int | float) or weight not in (0, 1):
            return f"messages[{i}].weight: {_shown(weight)} is not 0 or 1"
        if m.get("role") != "assistant":
            return f"messages[{i}].weight: only assistant messages take a weight, not {json.dumps(m.get('role'))}"
    return None


def _roles_in_order(roles: list[str]) -> bool:
    """System messages only first; a conversation's first non-system turn is the user's; it ends with the assistant."""
    body = roles[1:] if roles and roles[0] == "system" else roles
    if "system" in body or not body:
        return False
    if body == ["assistant"]:
        return True  # plain text for continued pre-training
    return body[0] == "user" and body[-1] == "assistant"


def _row(rec: RawRecord) -> dict:
    row = dict.fromkeys(NORMALIZED_SCHEMA)
    row.update(source_file=rec.source_file, line=rec.line, n_messages=0, n_assistant=0, n_empty=0, n_bad_role=0,
               roles_in_order=False)
    if rec.error:
        if rec.field:
            row["field_problem"] = f"{rec.field}: {rec.error}"
        else:
            row["problem"] = rec.error
        return row
    data = rec.data or {}
    shape = detect_shape(data)
    if shape is None:
        row["problem"] = (f"unrecognized shape with keys {_names(data)}: expected one of "
                          + "; ".join("+".join(sorted(req)) for req, _ in SHAPES.values()))
        return row
    required, optional = SHAPES[shape]
    unknown = sorted(set(data) - required - optional)
    row["shape"] = shape
    row["unknown_keys"] = ",".join(_names(unknown)) if unknown else None
    if bad := field_problem(shape, data):
        row["field_problem"] = ": ".join(bad)
        return row
    if shape in PREFERENCE_SHAPES:
        try:
            prompt, chosen, rejected = to_pair(shape, data)
        except PairProblem as exc:
            row["problem"] = f"field '{exc.field}' {exc.message}"
            return row
        messages = prompt + chosen
        row["n_prompt"] = len(prompt)
        row["rejected"] = _compact(rejected)
        row["pair_problem"] = pair_problem(shape, chosen, rejected)
    else:
        messages = to_messages(shape, data)
    roles = [m.get("role") for m in messages]
    contents = [m.get("content") for m in messages]
    if shape == "chat":
        row["weight_problem"] = weight_problem(messages)
    row["messages"] = _compact(messages, keep_weights=shape == "chat")
    row["n_messages"] = len(messages)
    row["n_assistant"] = sum(r == "assistant" for r in roles)
    row["n_empty"] = sum(not isinstance(c, str) or not c.strip() for c in contents)
    row["n_bad_role"] = sum(r not in ROLES for r in roles)
    row["roles_in_order"] = _roles_in_order([r for r in roles if isinstance(r, str)])
    return row


def normalize(records: Iterable[RawRecord]) -> pl.DataFrame:
    return pl.DataFrame([_row(r) for r in records], schema=NORMALIZED_SCHEMA)
