"""Detect each record's shape and normalize it into one chat-message schema.

Every example becomes a list of ``{"role", "content"}`` messages (``ftpipe.data.messages``; tool calls kept); a
conversation's assistant message that the tenant gave ``"weight": 0`` keeps it (shown to the model, not learned).
Derived columns describe what the pandera model checks (``ftpipe.data.schema``), so that validation is a
declarative schema, not scattered ifs. The manifest's ``columns:`` mapping (``ftpipe.data.columns``) renames a
record's keys before its shape is detected.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable

import polars as pl

from ftpipe.data.columns import ColumnMapping
from ftpipe.data.messages import (
    ROLES,
    FieldProblem,
    calls_outside,
    is_empty,
    kind_of,
    normalize_messages,
    shown,
    tools,
)
from ftpipe.data.preference import PREFERENCE_SHAPES, PairProblem, pair_message_lists, pair_problem, to_pair
from ftpipe.data.read import RawRecord

SHAPES: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    # shape: (required keys, optional keys)
    "chat": (frozenset({"messages"}), frozenset({"tools", "functions", "parallel_tool_calls", "id", "metadata"})),
    "sharegpt": (frozenset({"conversations"}), frozenset({"system", "tools", "id", "metadata"})),
    "prompt_completion": (frozenset({"prompt", "completion"}), frozenset({"id", "metadata", "system"})),
    "instruction": (frozenset({"instruction", "response"}),
                    frozenset({"input", "history", "id", "metadata", "system"})),
    "alpaca": (frozenset({"instruction", "output"}), frozenset({"input", "history", "id", "metadata", "system"})),
    "text": (frozenset({"text"}), frozenset({"id", "metadata"})),
    "preference": (frozenset({"prompt", "chosen", "rejected"}), frozenset({"id", "metadata", "system"})),
    "preference_api": (frozenset({"input", "preferred_output", "non_preferred_output"}),
                       frozenset({"id", "metadata"})),
    "kto": (frozenset({"prompt", "completion", "label"}), frozenset({"id", "metadata", "system"})),
}

REFUSED_SHAPES = {
    # TRL has a KTOTrainer, but this platform's tokenized cache, its preference evaluation (accuracy on pairs)
    # and its gates are built for pairs; until KTO is an objective here, unpaired rows are refused by name
    # rather than read as prompt/completion with an unknown key.
    "kto": ("unpaired preference rows (prompt/completion/label, as KTO trains on) are not supported: pair each "
            "prompt's preferred and rejected completion as prompt/chosen/rejected and set 'objective: dpo'"),
}
"""Shapes recognised only to refuse them with a message that says what they are."""

NORMALIZED_SCHEMA = {
    "source_file": pl.String,
    "line": pl.Int64,
    "shape": pl.String,
    "problem": pl.String,
    # "field: message" when one field is at fault: a value of the wrong type, or a record-level problem inside
    # one field (an unpaired surrogate, an over-long cell, an unknown role).
    "field_problem": pl.String,
    "unknown_keys": pl.String,
    "messages": pl.String,
    # The functions the example may call (JSON, OpenAI's form), rendered by the chat template; null: none.
    "tools": pl.String,
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

_CONVERSATION_FIELD = {"chat": "messages", "sharegpt": "conversations"}

FIELD_SEPARATOR = "\x1f"
"""Between the field and the message in the ``*_problem`` columns (read back by ``ftpipe.data.schema``): a field
path never holds it (odd keys are written as ASCII JSON, mapped names have no control characters), while a key
may well hold ": "."""


def detect_shape(data: dict) -> str | None:
    keys = set(data)
    # The most specific shape first: a preference pair also has a "prompt".
    for shape, (required, _) in sorted(SHAPES.items(), key=lambda item: -len(item[1][0])):
        if required <= keys:
            return shape
    return None


def _unrecognized(keys: set[str]) -> str:
    """Which shape the record is nearest to and the one key it lacks, when one shape is a key away (a typo, or
    another tool's name for it); otherwise every shape."""
    message = f"unrecognized shape with keys {_names(keys)}"
    near = []
    for shape, (required, optional) in SHAPES.items():
        missing = required - keys
        if shape not in REFUSED_SHAPES and len(missing) == 1 and len(required) > 1 and required & keys:
            near.append((len(keys - required - optional), shape, next(iter(missing))))
    if near:
        _, shape, lacking = min(near)
        required, optional = SHAPES[shape]
        spare = sorted(keys - required - optional)
        guess = difflib.get_close_matches(lacking, spare, n=1, cutoff=0.5)
        hint = f" (is {shown(guess[0])} it? then rename it, or map it in the manifest's columns:)" if guess else \
            " (name your key for it in the manifest's columns:)"
        return f"{message}: the '{shape}' shape ({'+'.join(sorted(required))}) lacks '{lacking}'{hint}"
    return message + ": expected one of " + "; ".join(
        "+".join(sorted(req)) for shape, (req, _) in SHAPES.items() if shape not in REFUSED_SHAPES)


def _pairs_history(history, field: str = "history") -> list[dict]:
    """Alpaca's ``history`` (LLaMA-Factory): earlier turns as ``[[instruction, response], ...]``."""
    if history is None:
        return []
    if not isinstance(history, list):
        raise FieldProblem(field, f"expected a list of [instruction, response] pairs, got {kind_of(history)}")
    out = []
    for i, pair in enumerate(history):
        if not isinstance(pair, list) or len(pair) != 2:
            raise FieldProblem(f"{field}[{i}]", f"expected an [instruction, response] pair, got {shown(pair)}")
        for j, text in enumerate(pair):
            if not isinstance(text, str):
                raise FieldProblem(f"{field}[{i}][{j}]", f"expected a string, got {kind_of(text)}")
        out += [{"role": "user", "content": pair[0]}, {"role": "assistant", "content": pair[1]}]
    return out


def to_messages(shape: str, data: dict, roles: dict[str, str] | None = None) -> list[dict]:
    system = [{"role": "system", "content": data["system"]}] if data.get("system") else []
    if shape == "chat":
        # ShareGPT turns under a "messages" key (LLaMA-Factory lets a dataset name its list so): read as such.
        return normalize_messages(data["messages"], "messages", sharegpt=_sharegpt_turns(data["messages"]),
                                  roles=roles)
    if shape == "sharegpt":
        return system + normalize_messages(data["conversations"], "conversations", sharegpt=True, roles=roles)
    if shape == "prompt_completion":
        # TRL's conversational prompt-completion: both sides lists of messages.
        prompt = normalize_messages(data["prompt"], "prompt", roles=roles) if isinstance(data["prompt"], list) \
            else [{"role": "user", "content": data["prompt"]}]
        completion = normalize_messages(data["completion"], "completion", roles=roles) \
            if isinstance(data["completion"], list) else [{"role": "assistant", "content": data["completion"]}]
        return system + prompt + completion
    if shape in ("instruction", "alpaca"):
        prompt = data["instruction"] + (f"\n\n{data['input']}" if data.get("input") else "")
        answer = data["response" if shape == "instruction" else "output"]
        return system + _pairs_history(data.get("history")) + [{"role": "user", "content": prompt},
                                                                {"role": "assistant", "content": answer}]
    if shape == "text":
        return [{"role": "assistant", "content": data["text"]}]
    raise ValueError(shape)


def _sharegpt_turns(messages) -> bool:
    return isinstance(messages, list) and bool(messages) and isinstance(messages[0], dict) \
        and messages[0].get("from") is not None and messages[0].get("role") is None


def _not_text(value, field: str) -> tuple[str, str] | None:
    return None if isinstance(value, str) else (field, f"expected a string, got {kind_of(value)}")


def messages_problem(messages, field: str = "messages", roles: dict[str, str] | None = None) -> tuple[str, str] | None:
    """(field, message) for the first problem in a list of messages given as the prompt or an answer of a
    preference pair: values of the wrong type, unknown roles, content parts that are not text."""
    try:
        normalize_messages(messages, field, roles=roles)
    except FieldProblem as exc:
        return exc.field, exc.message
    return None


# Per shape: the fields that hold text, required and optional (an optional one may be null: as if absent).
_TEXT_FIELDS = {
    "prompt_completion": ((), ("system",)),  # prompt and completion: text, or lists of messages (TRL)
    "instruction": (("instruction", "response"), ("input", "system")),
    "alpaca": (("instruction", "output"), ("input", "system")),
    "sharegpt": ((), ("system",)),
    "text": (("text",), ()),
    "preference": ((), ("system",)),
}


def field_problem(shape: str, data: dict, roles: dict[str, str] | None = None) -> tuple[str, str] | None:
    """(field, message) for the first field of the shape holding a value of the wrong type: a number, a list or
    an object where text belongs is named, not read as empty content."""
    required, optional = _TEXT_FIELDS.get(shape, ((), ()))
    for name in required:
        if bad := _not_text(data[name], name):
            return bad
    for name in optional:
        if data.get(name) is not None and (bad := _not_text(data[name], name)):
            return bad
    if shape == "prompt_completion":
        for name in ("prompt", "completion"):
            if not isinstance(data[name], list) and (bad := _not_text(data[name], name)):
                return bad
    for name, messages in pair_message_lists(shape, data) if shape in PREFERENCE_SHAPES else []:
        if bad := messages_problem(messages, name, roles):
            return bad
    return None


def _names(keys, limit: int = 20) -> list[str]:
    """Keys for a message, a bounded number of them, each shortened: a record may have thousands of keys, and a
    key may be a megabyte long."""
    shown_keys = [k if len(k) <= 60 else k[:60] + "..." for k in sorted(keys)[:limit]]
    return shown_keys + ([f"... and {len(keys) - limit} more"] if len(keys) > limit else [])


_KEPT = ("tool_calls", "tool_call_id", "name")
"""Message keys kept besides role and content, where present: what a chat template reads for tool use."""


def _compact(messages: list[dict], keep_weights: bool = False) -> str:
    # Compact separators: byte-identical to the vectorized path (fast_normalize), so split hashes agree. Only a
    # weight of 0 is kept: weight 1 is the default, so the same example with or without it splits the same way.
    def compact(m: dict) -> dict:
        out = {"role": m.get("role"), "content": m.get("content")}
        out.update((k, m[k]) for k in _KEPT if k in m)
        if keep_weights and m.get("weight", 1) == 0:
            out["weight"] = 0
        return out

    return json.dumps([compact(m) for m in messages], ensure_ascii=False, separators=(",", ":"))


def weight_problem(messages: list[dict], field: str = "messages") -> tuple[str, str] | None:
    """(field, message) for a bad per-message weight, as in OpenAI's chat fine-tuning format: 0 or 1, on
    assistant messages only. A null weight is no weight: a Parquet column of messages has a weight field on
    every message once one has it, and pandas and pyarrow write null on the others."""
    for i, m in enumerate(messages):
        weight = m.get("weight")
        if weight is None:
            continue
        if isinstance(weight, bool) or not isinstance(weight, int | float) or weight not in (0, 1):
            return f"{field}[{i}].weight", f"{shown(weight)} is not 0 or 1"
        if m.get("role") != "assistant":
            return f"{field}[{i}].weight", f"only assistant messages take a weight, not {json.dumps(m.get('role'))}"
    return None


def _roles_in_order(roles: list[str]) -> bool:
    """System messages only first; a conversation's first non-system turn is the user's; it ends with the assistant."""
    body = roles[1:] if roles and roles[0] == "system" else roles
    if "system" in body or not body:
        return False
    if body == ["assistant"]:
        return True  # plain text for continued pre-training
    return body[0] == "user" and body[-1] == "assistant"


def _at(mapping: ColumnMapping, field: str, message: str) -> str:
    """A problem in one field, in the tenant's names, as the schema reads it back (``FIELD_SEPARATOR``)."""
    return f"{mapping.tenant_path(field)}{FIELD_SEPARATOR}{message}"


def _row(rec: RawRecord, mapping: ColumnMapping) -> dict:
    row = dict.fromkeys(NORMALIZED_SCHEMA)
    row.update(source_file=rec.source_file, line=rec.line, n_messages=0, n_assistant=0, n_empty=0, n_bad_role=0,
               roles_in_order=False)
    if rec.error:
        if rec.field:
            row["field_problem"] = _at(mapping, rec.field, rec.error)
        else:
            row["problem"] = rec.error
        return row
    try:
        data = mapping.apply(rec.data or {})
    except FieldProblem as exc:
        row["field_problem"] = _at(mapping, exc.field, exc.message)
        return row
    shape = detect_shape(data)
    if shape is None:
        row["problem"] = _unrecognized(set(data))
        return row
    if shape in REFUSED_SHAPES:
        row["shape"], row["problem"] = shape, REFUSED_SHAPES[shape]
        return row
    required, optional = SHAPES[shape]
    unknown = sorted(set(data) - required - optional)
    row["shape"] = shape
    row["unknown_keys"] = ",".join(_names(unknown)) if unknown else None
    try:
        if bad := field_problem(shape, data, mapping.roles):
            raise FieldProblem(*bad)
        if shape in PREFERENCE_SHAPES:
            try:
                prompt, chosen, rejected = to_pair(shape, data, mapping.roles)
            except PairProblem as exc:
                row["problem"] = f"field '{mapping.tenant_path(exc.field)}' {exc.message}"
                return row
            messages = prompt + chosen
            row["n_prompt"] = len(prompt)
            row["rejected"] = _compact(rejected)
            row["pair_problem"] = _at(mapping, *problem) if (problem := pair_problem(shape, chosen, rejected)) \
                else None
        else:
            messages = to_messages(shape, data, mapping.roles)
        if data.get("tools") is not None and data.get("functions") is not None:
            raise FieldProblem("functions", "give tools or functions (OpenAI's older name), not both")
        listed = next((k for k in ("tools", "functions") if data.get(k) is not None), None)
        if shape in _CONVERSATION_FIELD and listed:
            available = tools(data[listed], listed)
            if outside := calls_outside(messages, available, _CONVERSATION_FIELD[shape]):
                raise outside
            row["tools"] = json.dumps(available, ensure_ascii=False, separators=(",", ":"))
    except FieldProblem as exc:
        row["field_problem"] = _at(mapping, exc.field, exc.message)
        return row
    roles = [m.get("role") for m in messages]
    if shape in _CONVERSATION_FIELD:
        problem = weight_problem(messages, _CONVERSATION_FIELD[shape])
        row["weight_problem"] = _at(mapping, *problem) if problem else None
    row["messages"] = _compact(messages, keep_weights=shape in _CONVERSATION_FIELD)
    row["n_messages"] = len(messages)
    row["n_assistant"] = sum(r == "assistant" for r in roles)
    row["n_empty"] = sum(is_empty(m) for m in messages)
    row["n_bad_role"] = sum(r not in ROLES for r in roles)
    row["roles_in_order"] = _roles_in_order([r for r in roles if isinstance(r, str)])
    return row


def normalize(records: Iterable[RawRecord], mapping: ColumnMapping | None = None) -> pl.DataFrame:
    mapping = mapping or ColumnMapping()
    return pl.DataFrame([_row(r, mapping) for r in records], schema=NORMALIZED_SCHEMA)
