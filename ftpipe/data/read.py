"""Read a tenant's dataset file into records that remember the file and the 1-based line they came from."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SUPPORTED_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet")


class UnsupportedFormat(ValueError):
    pass


@dataclass
class RawRecord:
    source_file: str
    line: int
    data: dict[str, Any] | None
    error: str | None = None


def read_records(path: str | Path, display_name: str | None = None) -> Iterator[RawRecord]:
    path = Path(path)
    name = display_name or path.name
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json"):
        yield from _read_jsonl(path, name)
    elif suffix == ".csv":
        yield from _read_table(path, name, csv=True)
    elif suffix == ".parquet":
        yield from _read_table(path, name, csv=False)
    else:
        raise UnsupportedFormat(f"{name}: unsupported file type '{suffix}' (use one of {', '.join(SUPPORTED_SUFFIXES)})")


def _read_jsonl(path: Path, name: str) -> Iterator[RawRecord]:
    with open(path, "rb") as f:
        for line_no, raw in enumerate(f, start=1):
            if line_no == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            if not raw.strip():
                continue
            try:
                text = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as exc:
                yield RawRecord(name, line_no, None, f"bytes are not valid UTF-8 at column {exc.start + 1}")
                continue
            try:
                value = json.loads(text)
            except json.JSONDecodeError as exc:
                yield RawRecord(name, line_no, None, f"invalid JSON: {exc.msg} at column {exc.colno}")
                continue
            if not isinstance(value, dict):
                yield RawRecord(name, line_no, None, f"expected a JSON object, got {type(value).__name__}")
                continue
            yield RawRecord(name, line_no, value)


def _read_table(path: Path, name: str, csv: bool) -> Iterator[RawRecord]:
    import polars as pl

    frame = pl.read_csv(path, infer_schema=False) if csv else pl.read_parquet(path)
    first_data_line = 2 if csv else 1  # a CSV's line 1 is its header
    for i, row in enumerate(frame.iter_rows(named=True)):
        data = {k: v for k, v in row.items() if v is not None}
        if "messages" in data and isinstance(data["messages"], str):
            try:
                data["messages"] = json.loads(data["messages"])
            except json.JSONDecodeError as exc:
                yield RawRecord(name, i + first_data_line, None, f"field 'messages': invalid JSON: {exc.msg}")
                continue
        yield RawRecord(name, i + first_data_line, data)
