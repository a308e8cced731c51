"""Partition-key rules: one key per tenant job, ``{tenant}__{job}``.

Names are restricted to ``[a-z0-9][a-z0-9-]{0,62}``: no ``/``, ``.`` or ``_``, so a key can never name a path
outside the tenant's own prefix, and the ``__`` separator can never be ambiguous. Dagster does not validate
dynamic partition keys itself, so every key goes through here. This module imports nothing from Dagster.
"""

from __future__ import annotations

import re

NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
SEPARATOR = "__"


class InvalidName(ValueError):
    pass


def validate_name(kind: str, value: object) -> str:
    if not isinstance(value, str) or not NAME_PATTERN.fullmatch(value):
        raise InvalidName(
            f"invalid {kind} name {value!r}: use 1-63 characters from a-z, 0-9 and '-', starting with a letter or digit"
        )
    return value


def partition_key(tenant: str, job: str) -> str:
    return f"{validate_name('tenant', tenant)}{SEPARATOR}{validate_name('job', job)}"


def parse_partition_key(key: str) -> tuple[str, str]:
    tenant, sep, job = key.partition(SEPARATOR)
    if not sep:
        raise InvalidName(f"invalid partition key {key!r}: expected '<tenant>{SEPARATOR}<job>'")
    return validate_name("tenant", tenant), validate_name("job", job)
