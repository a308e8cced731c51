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


def guess_encoding(path: Path) -> str:
    from charset_normalizer import from_path

    best = from_path(path).best()
    return best.encoding if best is not None else "an unknown encoding"


CHUNK_BYTES = 32 << 20


def iter_line_chunks(path: str | Path, chunk_bytes: int = CHUNK_BYTES) -> Iterator[tuple[int, bytes]]:
    """Whole lines in chunks of about ``chunk_bytes``, each with the 1-based number of its first line.

    Memory stays bounded by the chunk size whatever the file's size; a UTF-8 BOM at the start is dropped.
    """
    with open(path, "rb") as f:
        line_no, rest, first = 1, b"", True
        while True:
            block = f.read(chunk_bytes)
            if first:
                block, first = block.removeprefix(b"\xef\xbb\xbf"), False
            if not block:
                if rest:
                    yield line_no, rest
                return
            data = rest + block
            cut = data.rfind(b"\n")
            if cut < 0:
                rest = data
                continue
            chunk, rest = data[: cut + 1], data[cut + 1:]
            yield line_no, chunk
            line_no += chunk.count(b"\n")


def records_from_chunk(chunk: bytes, first_line: int, name: str, path: Path) -> Iterator[RawRecord]:
    """The exact path: every line on its own, so that each problem is named with its line."""
    encoding = None  # guessed once, at the first line that is not UTF-8
    for line_no, raw in enumerate(chunk.split(b"\n"), start=first_line):
        if not raw.strip():
            continue
        try:
            text = raw.decode("utf-8").rstrip("\r")
        except UnicodeDecodeError as exc:
            encoding = encoding or guess_encoding(path)
            yield RawRecord(name, line_no, None, f"not UTF-8 at column {exc.start + 1}: the file looks like "
                            f"{encoding}; re-save it as UTF-8")
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


def _read_jsonl(path: Path, name: str) -> Iterator[RawRecord]:
    for first_line, chunk in iter_line_chunks(path):
        yield from records_from_chunk(chunk, first_line, name, path)


def _read_table(path: Path, name: str, csv: bool) -> Iterator[RawRecord]:
    import polars as pl

    frame = pl.read_csv(path, infer_schema=False) if csv else pl.read_parquet(path)
    lines = _csv_start_lines(frame) if csv else list(range(1, frame.height + 1))
    for line, row in zip(lines, frame.iter_rows(named=True)):
        data = {k: v for k, v in row.items() if v is not None}
        if "messages" in data and isinstance(data["messages"], str):
            try:
                data["messages"] = json.loads(data["messages"])
            except json.JSONDecodeError as exc:
                yield RawRecord(name, line, None, f"field 'messages': invalid JSON: {exc.msg}")
                continue
        yield RawRecord(name, line, data)


def _csv_start_lines(frame) -> list[int]:
    """The physical line each CSV record starts on: quoted fields may hold newlines (line 1 is the header)."""
    import polars as pl

    if frame.width == 0 or frame.height == 0:
        return []
    newlines = pl.sum_horizontal(pl.col(c).fill_null("").str.count_matches("\n") for c in frame.columns)
    spans = frame.select((newlines + 1).alias("span"))["span"]
    return (spans.cum_sum() - spans + 2).to_list()
