"""Conversations as tenants write them, normalized to one message form.

    OpenAI chat        ``{"role", "content"}``; content a string or a list of text parts; assistant
                       ``tool_calls`` (``function.arguments`` a JSON string) and ``tool`` messages answering them
    ShareGPT           ``{"from", "value"}`` with human / gpt / system / function_call / observation, or the
                       ``{"role", "content"}`` variant (LLaMA-Factory's default format and most public chat sets)

The normalized message is ``{"role", "content"}`` with one of ``ROLES``, plus, where the tenant gave them,
``tool_calls`` (``[{"type": "function", "function": {"name", "arguments": object}}]``, the form transformers'
chat templates read), a tool message's ``tool_call_id`` / ``name``, and an assistant message's ``weight``. Every
problem raises ``FieldProblem`` with the path the tenant wrote (``conversations[3].from``), so the report can
name it.
"""

from __future__ import annotations

import difflib
import json
import math

from ftpipe.data.read import MAX_NESTING, RecordProblem, field_path, parse_json

ROLES = ("system", "user", "assistant", "tool")

CHAT_ROLE_ALIASES = {"developer": "system", "function": "tool"}
"""OpenAI's newer name for the system message, and the role of a function's answer in its older functions
format (``functions`` and an assistant's ``function_call``)."""

SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system",
                  "observation": "tool", "function": "tool", "tool": "tool", "function_call": "assistant",
                  "chatgpt": "assistant", "bing": "assistant", "bard": "assistant"}
"""ShareGPT's speakers as LLaMA-Factory and FastChat write them (FastChat also reads the original dump's chatgpt,
bing and bard as the assistant). ``function_call`` is the assistant calling a tool (its value is the call as
JSON); ``observation`` is the tool's answer."""
_SHAREGPT_SHOWN = ("human", "user", "gpt", "assistant", "system", "observation", "function", "tool", "function_call")
"""The speakers an error lists (the original dump's other names are read, not advertised)."""

_LIKELY = {"bot": "assistant", "model": "assistant", "ai": "assistant", "gpt": "assistant", "chatbot": "assistant",
           "agent": "assistant", "human": "user", "customer": "user", "person": "user", "prompter": "user",
           "function": "tool", "observation": "tool", "ipython": "tool", "developer": "system"}
"""Roles other tools and datasets use, and what they mean here: for the suggestion in an unknown-role error."""


class FieldProblem(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


_KINDS = {type(None): "null", bool: "bool", int: "int", float: "float", str: "string", list: "list", dict: "object",
          bytes: "bytes"}


def kind_of(value) -> str:
    """A value's type as a tenant would call it (Parquet values are Python's dates, decimals, ...)."""
    return _KINDS.get(type(value), type(value).__name__)


def shown(value, limit: int = 40) -> str:
    """A tenant's value quoted in a message: JSON where it is JSON, short whatever its size."""
    text = json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + "..."


def unknown_role(value: str, allowed) -> str:
    message = f"unknown role {shown(value)} (allowed: {', '.join(allowed)})"
    likely = _LIKELY.get(value.strip().lower()) if isinstance(value, str) else None
    if likely is None or likely not in allowed:
        close = difflib.get_close_matches(value.strip().lower(), list(allowed), n=1, cutoff=0.6)
        likely = close[0] if close else None
    if likely:
        message += f"; did you mean {shown(likely)}? (or map it in the manifest's roles:)"
    return message


def _text(value, where: str, *, optional: bool = False) -> str | None:
    """A message's content: a string, or OpenAI's content parts with their text joined."""
    if value is None and optional:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        texts = []
        for i, part in enumerate(value):
            at = f"{where}[{i}]"
            if not isinstance(part, dict):
                raise FieldProblem(at, f"expected a content part (an object with 'type'), got {kind_of(part)}")
            if part.get("type") != "text":
                raise FieldProblem(f"{at}.type", f"{shown(part.get('type'))} parts are not supported: the base "
                                                 "models are text-only; keep the text parts only")
            if not isinstance(part.get("text"), str):
                raise FieldProblem(f"{at}.text", f"expected a string, got {kind_of(part.get('text'))}")
            texts.append(part["text"])
        return "\n".join(texts)
    raise FieldProblem(where, f"expected a string, got {kind_of(value)}")


def _parsed(text: str, where: str, what: str = "not valid JSON"):
    """JSON inside a string (tool-call arguments, a ShareGPT function_call, a tools list), held to the same
    limits as a record: no NaN, no 5,000-digit numbers, no nesting past ``MAX_NESTING``, no lone surrogates."""
    try:
        return parse_json(text, where)
    except RecordProblem as exc:
        message = exc.message.removeprefix("invalid JSON: ")
        raise FieldProblem(exc.field or where, f"{what}: {message}") from None


def plain_json(value, where: str, depth: int = 0) -> None:
    """Raise ``FieldProblem`` unless ``value`` can be written as JSON as it is: a Parquet struct may hold dates,
    decimals, bytes or a float NaN where a tool's arguments or schema belong."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise FieldProblem(where, f"contains an unpaired UTF-16 surrogate \\u{ord(value[exc.start]):04x}") from None
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise FieldProblem(where, f"{value} is not a JSON number")
    elif isinstance(value, list | dict):
        if depth >= MAX_NESTING:
            raise FieldProblem(where, f"nested too deeply (over {MAX_NESTING} levels)")
        for key, item in value.items() if isinstance(value, dict) else enumerate(value):
            if isinstance(value, dict) and not isinstance(key, str):
                raise FieldProblem(where, f"a key must be a string, got {kind_of(key)}")
            if isinstance(key, str):
                plain_json(key, where, depth + 1)
            plain_json(item, field_path(where, key), depth + 1)
    elif value is not None and not isinstance(value, bool | int):
        raise FieldProblem(where, f"expected a JSON value, got {kind_of(value)}")


def _arguments(value, where: str) -> dict:
    """A tool call's arguments: OpenAI writes a JSON string, transformers an object; either must be an object."""
    if isinstance(value, str):
        value = _parsed(value, where)
    if not isinstance(value, dict):
        raise FieldProblem(where, f"expected a JSON object of arguments, got {kind_of(value)}")
    plain_json(value, where)
    return value


def _function_of(entry, at: str, what: str) -> tuple[dict, str]:
    """The function object of a ``tools`` or ``tool_calls`` entry and its path: OpenAI's ``{"type": "function",
    "function": {...}}``, or the bare function that transformers and LLaMA-Factory write."""
    if not isinstance(entry, dict):
        raise FieldProblem(at, f"expected a {what} (an object with 'function'), got {kind_of(entry)}")
    if entry.get("type", "function") != "function":
        raise FieldProblem(f"{at}.type", f"{shown(entry.get('type'))} {what}s are not supported (only 'function')")
    function, where = (entry["function"], f"{at}.function") if "function" in entry else (entry, at)
    if not isinstance(function, dict):
        raise FieldProblem(where, f"expected an object with the function's 'name', got {kind_of(function)}")
    name = function.get("name")
    if not isinstance(name, str) or not name.strip():
        raise FieldProblem(f"{where}.name", f"expected the function's name, got {shown(name)}")
    return function, where


def tool_calls(value, where: str) -> list[dict]:
    """OpenAI's ``tool_calls`` (or bare ``{"name", "arguments"}`` calls) in transformers' form."""
    calls = value if isinstance(value, list) else [value]
    if not calls:
        raise FieldProblem(where, "empty list of tool calls")
    out = []
    for i, call in enumerate(calls):
        function, at = _function_of(call, f"{where}[{i}]" if isinstance(value, list) else where, "tool call")
        normalized = {"type": "function", "function": {
            "name": function["name"], "arguments": _arguments(function.get("arguments", {}), f"{at}.arguments")}}
        if isinstance(call.get("id"), str):
            normalized["id"] = call["id"]
        out.append(normalized)
    return out


def tools(value, where: str = "tools") -> list[dict]:
    """The functions an example may call, as JSON schemas in OpenAI's form (``{"type": "function", "function":
    {"name", "description", "parameters"}}``); ShareGPT files give them as a JSON string of bare functions."""
    if isinstance(value, str):
        value = _parsed(value, where)
    if not isinstance(value, list):
        raise FieldProblem(where, f"expected a list of tools, got {kind_of(value)}")
    out = []
    for i, tool in enumerate(value):
        function, at = _function_of(tool, f"{where}[{i}]", "tool")
        if "parameters" in function and not isinstance(function["parameters"], dict):
            raise FieldProblem(f"{at}.parameters", f"expected a JSON schema object, got "
                                                   f"{kind_of(function['parameters'])}")
        plain_json(function, at)
        out.append({"type": "function", "function": function})
    return out


def _role(raw, where: str, aliases: dict[str, str], roles: dict[str, str], sharegpt: bool) -> str:
    if isinstance(raw, str) and raw in roles:
        return roles[raw]
    if isinstance(raw, str) and raw in aliases:
        return aliases[raw]
    # The names the tenant would write: the format's own (not the aliases it also takes) and its own mapping.
    allowed = [*(_SHAREGPT_SHOWN if sharegpt else ROLES), *(r for r in roles if r not in aliases)]
    if raw is None:
        raise FieldProblem(where, f"missing (allowed: {', '.join(allowed)})")
    if not isinstance(raw, str):
        raise FieldProblem(where, f"expected a string, got {kind_of(raw)}")
    raise FieldProblem(where, unknown_role(raw, allowed))


def normalize_messages(messages, field: str, *, sharegpt: bool = False,
                       roles: dict[str, str] | None = None) -> list[dict]:
    """A conversation in the normalized form. ``roles`` maps the tenant's own role names (the manifest's
    ``roles:``) onto ``ROLES``; ``sharegpt`` reads ``from``/``value`` as well as ``role``/``content``."""
    roles = roles or {}
    aliases = SHAREGPT_ROLES if sharegpt else {**{r: r for r in ROLES}, **CHAT_ROLE_ALIASES}
    if not isinstance(messages, list):
        raise FieldProblem(field, f"expected a list of messages, got {kind_of(messages)}")
    out = []
    for i, m in enumerate(messages):
        where = f"{field}[{i}]"
        if not isinstance(m, dict):
            raise FieldProblem(where, f"expected a message (an object with 'role' and 'content'), got {kind_of(m)}")
        role_key, content_key = "role", "content"
        if sharegpt:
            # A Parquet turn has every key of the column, null where the turn has none: null is absent.
            for theirs, ours in (("from", "role"), ("value", "content")):
                if m.get(theirs) is not None and m.get(ours) is not None:
                    raise FieldProblem(where, f"has both '{theirs}' and '{ours}': give one")
            role_key = "from" if m.get("from") is not None or m.get("role") is None else "role"
            content_key = "value" if m.get("value") is not None or m.get("content") is None else "content"
        raw_role = m.get(role_key)
        role = _role(raw_role, f"{where}.{role_key}", aliases, roles, sharegpt)
        if sharegpt and raw_role == "function_call" and role == "assistant":
            calls = m.get(content_key)
            if isinstance(calls, str):
                calls = _parsed(calls, f"{where}.{content_key}", "a function_call must be the call as JSON")
            out.append({"role": "assistant", "content": None,
                        "tool_calls": tool_calls(calls, f"{where}.{content_key}")})
            continue
        message: dict = {"role": role}
        message["content"] = _text(m.get(content_key), f"{where}.{content_key}", optional=True)
        for key in ("tool_calls", "function_call"):  # the second: OpenAI's older functions format, one call
            if m.get(key) is None:
                continue
            if role != "assistant":
                raise FieldProblem(f"{where}.{key}", f"only assistant messages make tool calls, not {shown(role)}")
            if "tool_calls" in message:
                raise FieldProblem(f"{where}.function_call", "give tool_calls or function_call, not both")
            message["tool_calls"] = tool_calls(m[key], f"{where}.{key}")
        if role == "tool":
            for key in ("tool_call_id", "name"):
                if m.get(key) is None:
                    continue
                if not isinstance(m[key], str):
                    raise FieldProblem(f"{where}.{key}", f"expected a string, got {kind_of(m[key])}")
                plain_json(m[key], f"{where}.{key}")
                message[key] = m[key]
        if "weight" in m:
            message["weight"] = m["weight"]
        out.append(message)
    return out


def is_empty(message: dict) -> bool:
    """No text to show or learn: an assistant message that only calls tools is not empty."""
    content = message.get("content")
    return (not isinstance(content, str) or not content.strip()) and not message.get("tool_calls")


def calls_outside(messages: list[dict], available: list[dict], field: str) -> FieldProblem | None:
    """A call to a function the example's tools do not list: the model would learn to call what it cannot."""
    names = {t["function"]["name"] for t in available}
    for i, m in enumerate(messages):
        for j, call in enumerate(m.get("tool_calls") or []):
            if call["function"]["name"] not in names:
                return FieldProblem(f"{field}[{i}].tool_calls[{j}].function.name",
                                    f"{shown(call['function']['name'])} is not among the example's tools "
                                    f"({', '.join(sorted(names)) or 'none'})")
    return None
