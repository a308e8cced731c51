"""Personal data and secrets in training text: find, validate and mask them.

Candidates are found with regular expressions; numbers that carry a checksum (card numbers, IBANs) only count
when the checksum holds (python-stdnum), which keeps order ids and timestamps out of the report. A finding is
never reported in full: the sample keeps only enough characters to find it in the file.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from stdnum import iban, luhn


@dataclass(frozen=True)
class PiiKind:
    name: str
    pattern: re.Pattern
    valid: Callable[[str], bool] = lambda s: True
    candidate: str | None = None
    """A superset of ``pattern`` in the dialect polars accepts (Rust regex: no look-around), for the
    vectorized first pass; None when ``pattern`` is already in that dialect."""


def _digits(text: str) -> str:
    return re.sub(r"\D", "", text)


PII_KINDS = [
    PiiKind("email", re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}")),
    PiiKind("card_number", re.compile(r"\b(?:\d[ -]?){12,18}\d\b"), lambda s: luhn.is_valid(_digits(s))),
    PiiKind("iban", re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?\b"),
            lambda s: iban.is_valid(s)),
    PiiKind("ssn", re.compile(r"\b(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}\b"),
            candidate=r"\b\d{3}-\d{2}-\d{4}\b"),
    PiiKind("phone", re.compile(r"(?<![\w-])(?:\+?\d{1,3}[ .-]?)?\(?\d{3}\)?[ .-]\d{3}[ .-]\d{4}(?![\w-])"),
            candidate=r"\(?\d{3}\)?[ .-]\d{3}[ .-]\d{4}"),
    PiiKind("secret", re.compile(
        r"\b(?:sk-[A-Za-z0-9_-]{20,}|AKIA[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{36,}|xox[abpr]-[A-Za-z0-9-]{10,}"
        r"|AIza[0-9A-Za-z_-]{35})\b")),
]

_IBAN = next(k for k in PII_KINDS if k.name == "iban")

# Every finding of every kind matches this; rows that do not need no closer look (used by polars and by the
# plain-Python baseline alike).
PREFILTER = "|".join(f"(?:{k.candidate or k.pattern.pattern})" for k in PII_KINDS)


def mask(value: str) -> str:
    """Keep a short prefix and the length: enough to locate a finding, never enough to use it."""
    keep = 2 if len(value) <= 8 else 4
    return f"{value[:keep]}…({len(value)} chars)"


def find_pii(text: str) -> list[tuple[str, str]]:
    """(kind, masked sample) for every finding in ``text``."""
    found = []
    # Digits inside an IBAN-shaped token are part of it, even when they happen to pass a card's Luhn check.
    iban_spans = [m.span() for m in _IBAN.pattern.finditer(text)]
    for kind in PII_KINDS:
        for match in kind.pattern.finditer(text):
            value = match.group(0)
            if kind is not _IBAN and any(a < match.end() and match.start() < b for a, b in iban_spans):
                continue
            if kind.valid(value):
                found.append((kind.name, mask(value)))
    return found
