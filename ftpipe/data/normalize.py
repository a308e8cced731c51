"""Detect each record's shape and normalize it into one chat-message schema.

Every example becomes a list of ``{"role", "content"}`` messages; a chat assistant message that the tenant gave
``"weight": 0`` keeps it (shown to the model, not learned). Derived columns describe what the pandera model
checks (``ftpipe.data.schema``), so that validation is a declarative schema, not scattered ifs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

import polars as pl

from ftpipe.data.preference import PREFERENCE_SHAPES, PairProblem, pair_problem, to_pair
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
    """Per-message weights, as in OpenAI's chat fine-tuning format: 0 or 1, on assistant messages only."""
    for i, m in enumerate(messages):
        if "weight" not in m:
            continue
        weight = m["weight"]
        if isinstance(weight, bool) or not isinstance(weight, int | float) or weight not in (0, 1):
            return f"messages[{i}].weight: {json.dumps(weight)} is not 0 or 1"
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
        row["problem"] = rec.error
        return row
    data = rec.data or {}
    shape = detect_shape(data)
    if shape is None:
        row["problem"] = (f"unrecognized shape with keys {sorted(data)}: expected one of "
                          + "; ".join("+".join(sorted(req)) for req, _ in SHAPES.values()))
        return row
    required, optional = SHAPES[shape]
    unknown = sorted(set(data) - required - optional)
    row["shape"] = shape
    row["unknown_keys"] = ",".join(unknown) if unknown else None
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
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        row["problem"] = "field 'messages' must be a list of objects with 'role' and 'content'"
        return row
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
