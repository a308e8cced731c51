"""Personal data and secrets in training text: find, validate and mask them.

Candidates are found with regular expressions; numbers that carry a checksum (card numbers, IBANs) only count
when the checksum holds (python-stdnum), which keeps order ids and timestamps out of the report. A finding is
never reported in full: the sample keeps only enough characters to find it in the file.

Python's ``re`` backtracks, and a tenant's text is up to a megabyte a record: finding every kind must take time
linear in the text, whatever the text. A pattern may only start a match where a bounded amount of work settles
it, or where no other start scans the same stretch again (see ``_emails``); ``tests/test_data_warnings.py`` times
each kind on a megabyte of its worst text. Checking a candidate's checksum costs more than finding it, so the
cheap part of each check comes first, and a text stops being searched at ``MAX_FINDINGS``.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache

from stdnum import iban


@dataclass(frozen=True)
class PiiKind:
    name: str
    pattern: re.Pattern
    valid: Callable[[str], bool] = lambda s: True
    candidate: str | None = None
    """A superset of ``pattern`` in the dialect polars accepts (Rust regex: no look-around), for the
    vectorized first pass; None when ``pattern`` is already in that dialect."""
    find: Callable[[str], Iterator[re.Match]] | None = None
    """``pattern.finditer``'s matches, found in linear time where ``pattern`` alone would not be."""


MAX_FINDINGS = 1_000
"""Findings reported for one text, which is searched no further: a record with more is flagged all the same, and
a megabyte of valid IBANs (35,000, at 50 us each for stdnum's country checks) would take seconds."""


_DOUBLED = str.maketrans("0123456789", "0246813579")  # a digit doubled, its digits summed


def _card_number(value: str) -> bool:
    """stdnum's ``luhn.is_valid`` on the digits, several times faster (a megabyte of text holds 50,000
    candidates). A candidate holds digits, spaces and dashes only."""
    digits = value.replace(" ", "").replace("-", "")
    return (sum(map(int, digits[-1::-2])) + sum(map(int, digits[-2::-2].translate(_DOUBLED)))) % 10 == 0


@lru_cache(maxsize=4096)
def _iban(value: str) -> bool:
    """stdnum's ``iban.is_valid``, its checksum first: only a number that passes it gets the country checks."""
    number = value.replace(" ", "")
    if int("".join(str(int(c, 36)) for c in number[4:] + number[:4])) % 97 != 1:
        return False
    return iban.is_valid(value)


_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}")
_EMAIL_AT_RUN_START = re.compile(r"(?<![A-Za-z0-9._%+-])" + _EMAIL.pattern)


def _emails(text: str) -> Iterator[re.Match]:
    """``_EMAIL.finditer(text)``, in linear time. Searched for as it is, the local part is tried from every
    position of a run of its characters, each try scanning to the run's end (40,000 letters: 3.8 s). A match
    found from one position of a run would be found from the run's start, through the same '@', so only run
    starts are tried; and, where the search resumes inside a run (right after a match, "a@b.co.c@d.co"), there."""
    at = 0
    while match := _EMAIL_AT_RUN_START.search(text, at):
        while match:
            yield match
            at = match.end()
            match = _EMAIL.match(text, at)


PII_KINDS = [
    PiiKind("email", _EMAIL, find=_emails),
    PiiKind("card_number", re.compile(r"\b(?:\d[ -]?){12,18}\d\b"), _card_number),
    PiiKind("iban", re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?\b"), _iban),
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
    """(kind, masked sample) for every finding in ``text``, up to ``MAX_FINDINGS``."""
    found = []
    # Digits inside an IBAN-shaped token are part of it, even when they happen to pass a card's Luhn check. The
    # spans are in order and do not overlap: the one that could overlap a match is found by bisection (a
    # megabyte of IBAN-shaped tokens has tens of thousands of them).
    iban_spans = [m.span() for m in _IBAN.pattern.finditer(text)]
    iban_ends = [end for _, end in iban_spans]
    for kind in PII_KINDS:
        for match in (kind.find or kind.pattern.finditer)(text):
            value = match.group(0)
            if kind is not _IBAN:
                nearest = bisect_right(iban_ends, match.start())  # the first span ending after the match starts
                if nearest < len(iban_spans) and iban_spans[nearest][0] < match.end():
                    continue
            if kind.valid(value):
                found.append((kind.name, mask(value)))
                if len(found) >= MAX_FINDINGS:
                    return found
    return found
