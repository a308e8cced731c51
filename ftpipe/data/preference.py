"""Preference pairs for DPO, in the shapes tenants bring them, as (prompt, chosen, rejected) message lists.

    prompt / chosen / rejected           strings (a one-turn prompt and two answers), or conversations:
                                         ``prompt`` a list of messages, ``chosen`` / ``rejected`` lists of
                                         assistant messages (TRL's conversational format)
    input / preferred_output /           the hosted fine-tuning APIs' shape: ``input.messages`` is the prompt,
    non_preferred_output                 the two outputs are lists of assistant messages
"""

from __future__ import annotations

from ftpipe.data.messages import FieldProblem, normalize_messages

PREFERENCE_SHAPES = ("preference", "preference_api")


class PairProblem(FieldProblem):
    """A pair's field that is neither text nor a list of messages: the record cannot be read as a pair."""


def _as_messages(value, role: str, field: str, roles: dict[str, str] | None = None) -> list[dict]:
    if isinstance(value, str):
        return [{"role": role, "content": value}]
    if isinstance(value, list) and all(isinstance(m, dict) for m in value):
        # Checked before (``ftpipe.data.normalize.field_problem``): this only normalizes them.
        return normalize_messages(value, field, roles=roles)
    raise PairProblem(field, "must be a string or a list of messages with 'role' and 'content'")


def to_pair(shape: str, data: dict, roles: dict[str, str] | None = None) -> tuple[list[dict], list[dict], list[dict]]:
    """(prompt, chosen, rejected); raises ``PairProblem`` naming the field at fault."""
    if shape == "preference":
        prompt = _as_messages(data["prompt"], "user", "prompt", roles)
        if data.get("system"):
            prompt = [{"role": "system", "content": data["system"]}, *prompt]
        chosen = _as_messages(data["chosen"], "assistant", "chosen", roles)
        rejected = _as_messages(data["rejected"], "assistant", "rejected", roles)
    elif shape == "preference_api":
        source = data["input"]
        if not isinstance(source, dict) or "messages" not in source:
            raise PairProblem("input", "must be an object with 'messages'")
        prompt = _as_messages(source["messages"], "user", "input.messages", roles)
        chosen = _as_messages(data["preferred_output"], "assistant", "preferred_output", roles)
        rejected = _as_messages(data["non_preferred_output"], "assistant", "non_preferred_output", roles)
    else:
        raise ValueError(shape)
    return prompt, chosen, rejected


def pair_message_lists(shape: str, data: dict) -> list[tuple[str, list]]:
    """The pair's fields given as lists of messages, by the name the tenant wrote: their messages are checked like
    a chat's (``ftpipe.data.normalize.messages_problem``); strings and other types are ``to_pair``'s to judge."""
    if shape == "preference":
        fields = {name: data[name] for name in ("prompt", "chosen", "rejected")}
    elif shape == "preference_api":
        source = data["input"]
        fields = {"input.messages": source.get("messages") if isinstance(source, dict) else None,
                  "preferred_output": data["preferred_output"], "non_preferred_output": data["non_preferred_output"]}
    else:
        raise ValueError(shape)
    return [(name, value) for name, value in fields.items() if isinstance(value, list)]


def pair_problem(shape: str, chosen: list[dict], rejected: list[dict]) -> tuple[str, str] | None:
    """(field, message) for what is wrong with the two answers; None when the pair can teach a preference."""
    names = ("chosen", "rejected") if shape == "preference" else ("preferred_output", "non_preferred_output")
    for name, answer in zip(names, (chosen, rejected)):
        if not answer:
            return name, "empty"
        if any(m.get("role") != "assistant" for m in answer):
            return name, "must hold assistant message(s) only"
        if any(not isinstance(m.get("content"), str) or not m["content"].strip() for m in answer):
            return name, "empty content"
    if [m["content"] for m in chosen] == [m["content"] for m in rejected]:
        return names[1], f"identical to {names[0]} (nothing to prefer)"
    return None
