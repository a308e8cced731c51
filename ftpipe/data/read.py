"""Read a tenant's dataset file into records that remember the file and the 1-based line they came from."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import polars as pl

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


TABLE_BATCH_ROWS = 50_000


def _read_table(path: Path, name: str, csv: bool) -> Iterator[RawRecord]:
    if csv and (bad := _first_non_utf8(path)):
        # polars would stop at it with no line number; the tenant needs the line and the encoding.
        line, column = bad
        yield RawRecord(name, line, None, f"not UTF-8 at column {column}: the file looks like "
                        f"{guess_encoding(path)}; re-save it as UTF-8")
        return
    for frame, lines in (_csv_frames(path) if csv else _parquet_frames(path)):
        for line, row in zip(lines, frame.iter_rows(named=True)):
            data = {k: v for k, v in row.items() if v is not None}
            if "messages" in data and isinstance(data["messages"], str):
                try:
                    data["messages"] = json.loads(data["messages"])
                except json.JSONDecodeError as exc:
                    yield RawRecord(name, line, None, f"field 'messages': invalid JSON: {exc.msg}")
                    continue
            yield RawRecord(name, line, data)


def _csv_frames(path: Path):
    """``TABLE_BATCH_ROWS`` records at a time (polars' own CSV parser, streaming), each with the physical line it
    starts on: a quoted field may hold newlines, so the count carries from batch to batch."""
    import polars as pl

    first = 2  # line 1 is the header
    try:
        for frame in pl.scan_csv(path, infer_schema=False).collect_batches(chunk_size=TABLE_BATCH_ROWS):
            lines, first = _csv_start_lines(frame, first)
            yield frame, lines
    except pl.exceptions.NoDataError:
        return  # an empty file holds no records, like an empty JSONL file: "too few valid examples" says so


def parquet_frames(path: str | Path, columns: list[str] | None = None,
                   batch_rows: int = 100_000) -> Iterator[pl.DataFrame]:
    """A Parquet file's rows in order, a batch at a time; nothing is read until the first batch is asked for."""
    import polars as pl
    import pyarrow.parquet as pq

    for batch in pq.ParquetFile(path).iter_batches(batch_size=batch_rows, columns=columns):
        yield pl.from_arrow(batch)


def _parquet_frames(path: Path):
    """``TABLE_BATCH_ROWS`` rows at a time, each with its 1-based row numbers."""
    first = 1
    for frame in parquet_frames(path, batch_rows=TABLE_BATCH_ROWS):
        yield frame, range(first, first + frame.height)
        first += frame.height


def _first_non_utf8(path: Path) -> tuple[int, int] | None:
    """The 1-based line and column of a file's first byte that is not UTF-8, read chunk by chunk."""
    for first_line, chunk in iter_line_chunks(path):
        try:
            chunk.decode("utf-8")
        except UnicodeDecodeError as exc:
            before = chunk[:exc.start]
            return first_line + before.count(b"\n"), exc.start - (before.rfind(b"\n") + 1) + 1
    return None


def _csv_start_lines(frame, first: int) -> tuple[list[int], int]:
    """The physical line each record starts on, the first starting on ``first``, and the line after the last."""
    import polars as pl

    if frame.width == 0 or frame.height == 0:
        return [], first
    newlines = pl.sum_horizontal(pl.col(c).fill_null("").str.count_matches("\n") for c in frame.columns)
    spans = frame.select((newlines + 1).alias("span"))["span"]
    return (spans.cum_sum() - spans + first).to_list(), first + int(spans.sum())
