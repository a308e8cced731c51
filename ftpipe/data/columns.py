"""The manifest's ``columns:`` and ``roles:``: a tenant's own key and role names, mapped onto the platform's.

    columns:                      # platform name: the tenant's key
      messages: dialogue          # a top-level field of any shape
      role: speaker               # a key inside each message
      content: utterance
    roles:                        # the tenant's role: the platform's
      bot: assistant

The idea of Axolotl's ``field_messages`` / ``message_property_mappings`` / ``roles`` and AutoTrain's
``column_mapping``: a file exported by another tool trains without being rewritten. Errors still name the
tenant's own keys (``dialogue[2].speaker``), since that is what the tenant can find in the file.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ftpipe.data.messages import ROLES, FieldProblem
from ftpipe.data.read import JSON_COLUMNS, field_path

if TYPE_CHECKING:  # the manifest module reads this one's field names
    from ftpipe.manifest import JobManifest

RECORD_FIELDS = ("messages", "conversations", "tools", "prompt", "completion", "instruction", "input", "output",
                 "response", "history", "system", "text", "chosen", "rejected", "preferred_output",
                 "non_preferred_output", "id", "metadata")
"""Every key some shape reads (``ftpipe.data.normalize.SHAPES``)."""
MESSAGE_FIELDS = ("role", "content")
"""Keys inside a message. ShareGPT's ``from`` / ``value`` are read as they are."""
_MESSAGE_LISTS = ("messages", "conversations", "prompt", "chosen", "rejected", "preferred_output",
                  "non_preferred_output")
_KEY = re.compile(r"[^\x00-\x1f\x7f]{1,128}")


def check_columns(columns: dict) -> None:
    """Raise ``ValueError`` naming the entry at fault (the manifest's admission check names the field)."""
    for name, key in columns.items():
        if name not in RECORD_FIELDS + MESSAGE_FIELDS:
            raise ValueError(f"unknown field {str(name)[:60]!r}; "
                             f"map one of {', '.join(RECORD_FIELDS + MESSAGE_FIELDS)}")
        if not isinstance(key, str) or not _KEY.fullmatch(key):
            raise ValueError(f"'{name}': expected the key name in your file (1-128 characters, no control "
                             f"characters), got {str(key)[:60]!r}")
    keys = list(columns.values())
    if len(set(keys)) != len(keys):
        twice = sorted({k for k in keys if keys.count(k) > 1})
        raise ValueError(f"the key {twice[0][:60]!r} is mapped to more than one field")


def check_roles(roles: dict) -> None:
    for name, role in roles.items():
        if not isinstance(name, str) or not _KEY.fullmatch(name):
            raise ValueError(f"expected the role name in your file, got {str(name)[:60]!r}")
        if role not in ROLES:
            raise ValueError(f"'{name[:60]}': {str(role)[:60]!r} is not one of {', '.join(ROLES)}")


def _member(key: str) -> str:
    """``.key``, or ``["odd key"]`` for a key that is not a plain name."""
    path = field_path("", key)
    return path if path.startswith("[") else "." + path


@dataclass
class ColumnMapping:
    columns: dict[str, str] = field(default_factory=dict)
    """Platform name -> the tenant's key."""
    roles: dict[str, str] = field(default_factory=dict)
    """The tenant's role -> the platform's."""

    def __post_init__(self) -> None:
        check_columns(self.columns)
        check_roles(self.roles)
        self._record = {key: name for name, key in self.columns.items() if name in RECORD_FIELDS}
        self._message = {key: name for name, key in self.columns.items() if name in MESSAGE_FIELDS}

    @classmethod
    def from_manifest(cls, manifest: JobManifest) -> ColumnMapping:
        return cls(dict(manifest.columns), dict(manifest.roles))

    def __bool__(self) -> bool:
        return bool(self.columns or self.roles)

    def digest(self) -> str:
        """Part of the validated file's name: the same upload under another mapping is another dataset."""
        text = json.dumps({"columns": self.columns, "roles": self.roles}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()

    def json_columns(self) -> tuple[str, ...]:
        """The table columns that hold JSON text under this mapping (``ftpipe.data.read.JSON_COLUMNS``): not a
        column of that name that the mapping gives another meaning."""
        keys = (self.columns.get(name, name) for name in JSON_COLUMNS)
        return tuple(key for key in keys if self._record.get(key, key) in JSON_COLUMNS)

    def apply(self, data: dict) -> dict:
        """The record with the platform's key names. A key of the file that has a platform name another key is
        mapped onto is kept apart under its own name, quoted, so that it shows as an unknown key, not lost."""
        if not self._record and not self._message:
            return data
        targets = set(self._record.values())
        out = {}
        for key, value in data.items():
            if key in self._record:
                out[self._record[key]] = value
            elif key in targets:
                out[f"'{key}' (besides the mapped one)"] = value
            else:
                out[key] = value
        if self._message:
            for name in _MESSAGE_LISTS:
                if isinstance(out.get(name), list):
                    out[name] = [self._message_keys(m, f"{name}[{i}]") for i, m in enumerate(out[name])]
            source = out.get("input")
            if isinstance(source, dict) and isinstance(source.get("messages"), list):
                out["input"] = {**source, "messages": [self._message_keys(m, f"input.messages[{i}]")
                                                       for i, m in enumerate(source["messages"])]}
        return out

    def _message_keys(self, message, where: str):
        """The message with the platform's key names; ``FieldProblem`` when it also has the platform's own key
        (a Parquet null is no key), since which of the two is meant cannot be told."""
        if not isinstance(message, dict):
            return message
        out = {}
        for key, value in message.items():
            name = self._message.get(key, key)
            if name != key and value is not None and message.get(name) is not None:
                raise FieldProblem(where, f"has both {json.dumps(key)} (mapped to {name}) and '{name}': give one")
            if value is not None or name not in out:
                out[name] = value
        return out

    def tenant_path(self, path: str) -> str:
        """A field path in the platform's names (``messages[2].role``) in the tenant's (``dialogue[2].speaker``),
        an odd key written as JSON (``["chat log"][1].content``), as ``ftpipe.data.read.field_path`` does."""
        if not self.columns:
            return path
        head = re.match(r"[A-Za-z_]+", path)
        if head and head.group(0) in self.columns:
            path = field_path("", self.columns[head.group(0)]) + path[head.end():]
        for name in MESSAGE_FIELDS:
            if name in self.columns:
                key = self.columns[name]  # re.sub calls the function before the loop moves on
                path = re.sub(rf"\]\.{name}\b", lambda m: "]" + _member(key), path)
        return path
