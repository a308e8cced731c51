"""Read a tenant's dataset file into records that remember the file and the 1-based line they came from.

Nothing a tenant uploads may make reading raise anything but ``UnsupportedFormat``: a file that cannot be read
at all (compressed, binary, not Parquet, broken CSV) is one file-level error; everything else is a ``RawRecord``
whose ``error`` names the line, and ``field`` where one is at fault.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, cast

if TYPE_CHECKING:
    import numpy as np
    import polars as pl
    from polars._typing import PolarsDataType

SUPPORTED_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet")

MAX_RECORD_BYTES = 1 << 20
"""The most one record (a JSONL line, a CSV or Parquet row) may hold. Longer ones are refused before they are
decoded, so that a single line without a newline cannot take the memory: a real example is a few kilobytes."""

MAX_NESTING = 100
"""How deeply ``[`` and ``{`` may nest in one record. Python's json and polars recurse per level; a chat record
needs 4. Checked on the text before any parser sees it."""

LIST_SLOT_BYTES = 8
"""What each element of a list counts towards a record's size, besides its text, whatever it holds: six million
nulls in a list are a kilobyte of Parquet and over a gigabyte as Python objects."""

MAX_COLUMNS = 64
"""Columns a CSV or Parquet upload may have: a shape needs at most six, and every row of a 20,000-column file
would become a dict of 20,000 keys."""


class UnsupportedFormat(ValueError):
    pass


class UnreadableFile(UnsupportedFormat):
    """The file as a whole cannot be read as its type says (compressed, binary, not Parquet, malformed CSV)."""


@dataclass
class RawRecord:
    source_file: str
    line: int
    data: dict[str, Any] | None
    error: str | None = None
    field: str | None = None
    """The field ``error`` is about (e.g. ``messages[0].content``); None: the record as a whole."""


JSON_COLUMNS = ("messages", "conversations", "history")
"""Table columns whose cells hold JSON text (a conversation in one CSV cell): decoded when they are strings."""


def read_records(path: str | Path, display_name: str | None = None) -> Iterator[RawRecord]:
    for batch in _record_groups(path, display_name, JSON_COLUMNS):
        yield from batch


def record_batches(path: str | Path, display_name: str | None = None,
                   json_columns: tuple[str, ...] = JSON_COLUMNS) -> Iterator[list[RawRecord]]:
    """``read_records`` a chunk of lines (JSONL, ``CHUNK_BYTES``) or a frame (CSV and Parquet: ``TABLE_BATCH_ROWS``
    records, ``TABLE_BATCH_BYTES`` of decoded text) at a time, so that work done a batch at a time (normalizing,
    the data-quality checks) is bounded whatever the upload. A number of records is not: a few hundred bytes of
    Parquet may decode to thousands of records of a megabyte each."""
    for batch in _record_groups(path, display_name, json_columns):
        yield list(batch)


def _record_groups(path: str | Path, display_name: str | None,
                   json_columns: tuple[str, ...]) -> Iterator[Iterator[RawRecord]]:
    path = Path(path)
    name = display_name or path.name
    suffix = path.suffix.lower()
    if suffix == ".json" and is_json_array(path):
        yield from json_array_records(path, name)
    elif suffix in (".jsonl", ".json"):
        for chunk in iter_line_chunks(path, name=name):
            yield records_from_chunk(chunk, name)
    elif suffix == ".csv":
        yield from _table_records(path, name, True, json_columns)
    elif suffix == ".parquet":
        yield from _table_records(path, name, False, json_columns)
    else:
        raise UnsupportedFormat(f"{name}: unsupported file type '{suffix}' "
                                f"(use one of {', '.join(SUPPORTED_SUFFIXES)})")


def guess_encoding(sample: bytes) -> str:
    from charset_normalizer import from_bytes

    best = from_bytes(sample).best()
    return best.encoding if best is not None else "an unknown encoding"


def _not_utf8(chunk: bytes, at: int) -> str:
    # A window around the bad byte, not the file: the guess needs the odd bytes, and the file may be gigabytes.
    sample = chunk[max(0, at - (1 << 15)): at + (1 << 15)]
    return f"the file looks like {guess_encoding(sample)}; re-save it as UTF-8"


# --- what the file is, from its first bytes --------------------------------------------------------------------

_SIGNATURES = (
    (b"\x1f\x8b", "gzip-compressed"),
    (b"PK\x03\x04", "a zip archive"),
    (b"PK\x05\x06", "a zip archive"),
    (b"\xfd7zXZ\x00", "xz-compressed"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed"),
    (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"),
)
_BZIP2 = re.compile(rb"BZh[1-9]1AY&SY")


def refuse_unreadable(head: bytes, name: str, text: bool = True) -> None:
    """Raise ``UnreadableFile`` when a file's first bytes show it is not what its name says: otherwise a gzip
    upload would get one 'not UTF-8' error per line instead of one that says what to do."""
    kind = next((k for magic, k in _SIGNATURES if head.startswith(magic)), None)
    if kind is None and _BZIP2.match(head):
        kind = "bzip2-compressed"
    if kind:
        advice = "unpack it and upload the data file itself" if "archive" in kind else "upload it uncompressed"
        raise UnreadableFile(f"{name}: this file is {kind}; {advice}")
    if not text:
        return
    if head.startswith(b"PAR1"):
        raise UnreadableFile(f"{name}: this file is Parquet; name it .parquet")
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise UnreadableFile(f"{name}: this file is UTF-16 (or UTF-32) text; re-save it as UTF-8")
    if b"\x00" in head:
        raise UnreadableFile(f"{name}: looks binary (NUL bytes), not text; upload JSONL or CSV as UTF-8 text")


# --- lines -----------------------------------------------------------------------------------------------------

CHUNK_BYTES = 32 << 20


class LineChunk(NamedTuple):
    first_line: int
    """The 1-based number of the first line in ``data``."""
    data: bytes
    """Whole lines; an over-long line is left in as an empty line, so that the numbering holds."""
    too_long: dict[int, int]
    """Line number -> bytes of each line dropped from ``data`` for being longer than ``MAX_RECORD_BYTES``."""


def iter_line_chunks(path: str | Path, chunk_bytes: int = CHUNK_BYTES, name: str | None = None) -> Iterator[LineChunk]:
    """Whole lines in chunks of about ``chunk_bytes``; a UTF-8 BOM at the start is dropped.

    Memory stays bounded by ``chunk_bytes + MAX_RECORD_BYTES`` whatever the file: a line that grows past
    ``MAX_RECORD_BYTES`` is read on block by block and only its length kept. Raises ``UnreadableFile`` when the
    first block shows a compressed or binary file.
    """
    path = Path(path)
    with open(path, "rb") as f:
        line_no, rest, first = 1, b"", True  # ``rest``: the start of a line whose end is not read yet
        skipping = None  # bytes of an over-long line read so far, while its end is not found
        too_long: dict[int, int] = {}
        while True:
            block = f.read(chunk_bytes)
            if first:
                block, first = block.removeprefix(b"\xef\xbb\xbf"), False
                refuse_unreadable(block, name or path.name)
            if skipping is not None:
                end = block.find(b"\n")
                if block and end < 0:
                    skipping += len(block)
                    continue
                # Its end (or the file's): its newline stays, ending the empty line that takes its place.
                too_long[line_no] = skipping + max(end, 0)
                skipping, block = None, block[end:] if end >= 0 else b""
            if not block:
                if rest or too_long:
                    yield LineChunk(line_no, rest, too_long)
                return
            data = rest + block
            cut = data.rfind(b"\n")
            chunk, rest = (data[: cut + 1], data[cut + 1:]) if cut >= 0 else (b"", data)
            if chunk:
                yield LineChunk(line_no, chunk, too_long)
                line_no += chunk.count(b"\n")
                too_long = {}
            if len(rest) > MAX_RECORD_BYTES:
                skipping, rest = len(rest), b""


def too_big(n_bytes: int, what: str = "record") -> str:
    return (f"{what} is {n_bytes:,} bytes, over the {MAX_RECORD_BYTES >> 20} MiB limit for one record; "
            "split or shorten it")


# --- JSON ------------------------------------------------------------------------------------------------------

class RecordProblem(ValueError):
    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


_JSON_SPECIAL = re.compile(r'[\[\]{}"\\]')


def too_deep(text: str, limit: int = MAX_NESTING) -> bool:
    """Whether ``[`` and ``{`` nest deeper than ``limit`` outside strings. Counting brackets settles almost every
    line; the rest get one linear scan that stops at the limit."""
    if text.count("[") + text.count("{") <= limit:
        return False
    depth, in_string, escaped = 0, False, -1
    for match in _JSON_SPECIAL.finditer(text):
        ch, at = match.group(), match.start()
        if at == escaped:
            continue
        if in_string:
            if ch == "\\":
                escaped = at + 1
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return True
        elif ch in "]}":
            depth -= 1
    return False


def _refuse_constant(name: str):
    raise RecordProblem(f"invalid JSON: NaN/Infinity are not JSON numbers (found {name}); write null or a string")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise RecordProblem(f"invalid JSON: the number {text[:24]}{'...' if len(text) > 24 else ''} is too large "
                            "for a 64-bit float")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    """An object whose keys are all different: for a repeated key, Python's json keeps the last value and polars
    the first, so which one a record means would depend on the reader."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for repeated, _ in pairs:  # stops at the first key seen before: there is one, as len(obj) != len(pairs)
            if repeated in seen:
                break
            seen.add(repeated)
        shown = repeated if len(repeated) <= 40 else repeated[:40] + "..."
        raise RecordProblem(f"invalid JSON: the key {json.dumps(shown)} appears twice in one object; keep one")
    return obj


# Built once: ``json.loads`` with hooks would build a decoder per line, a third of the parsing time.
_DECODER = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite_float,
                            object_pairs_hook=_unique_keys)

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def field_path(parent: str, key: str | int) -> str:
    """``messages[0].content``; a key that is not a plain name is written as JSON (ASCII), so that the path is
    always printable."""
    if isinstance(key, int):
        return f"{parent}[{key}]"
    if _PLAIN_KEY.fullmatch(key):
        return f"{parent}.{key}" if parent else key
    return f"{parent}[{json.dumps(key)}]"


def _unpaired_surrogate(value: Any, path: str) -> tuple[str, str] | None:
    """(where, what) of the first key or string holding half a UTF-16 pair: Python's json lets ``"\\ud800"``
    through, and no such text can be written as UTF-8. Depth is bounded by ``MAX_NESTING``."""
    def bad(text: str) -> str | None:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            return f"\\u{ord(text[exc.start]):04x}"
        return None

    if isinstance(value, str):
        code = bad(value)
        return (path, f"contains an unpaired UTF-16 surrogate {code}") if code else None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        if isinstance(key, str) and (code := bad(key)):
            return path, f"a key contains an unpaired UTF-16 surrogate {code}"
        if found := _unpaired_surrogate(item, field_path(path, key)):
            return found
    return None


def parse_json(text: str, field: str = "") -> Any:
    """``json.loads`` of a tenant's text, refusing what Python accepts but JSON or the later stages do not: NaN and
    Infinity, numbers out of range, nesting deeper than ``MAX_NESTING``, unpaired surrogates. Raises
    ``RecordProblem``; ``field`` is where ``text`` came from (empty for a whole record)."""
    if too_deep(text):
        raise RecordProblem(f"invalid JSON: nested too deeply (over {MAX_NESTING} levels of [ and {{)", field or None)
    try:
        value = _DECODER.decode(text)
    except RecordProblem as exc:
        raise RecordProblem(exc.message, field or None) from None
    except json.JSONDecodeError as exc:
        raise RecordProblem(f"invalid JSON: {exc.msg} at column {exc.colno}", field or None) from None
    except ValueError:  # int(): Python reads at most 4,300 digits
        raise RecordProblem("invalid JSON: a number with more than 4,300 digits", field or None) from None
    except RecursionError:  # never reached past ``too_deep``; kept so that no parser limit is a platform error
        raise RecordProblem("invalid JSON: nested too deeply", field or None) from None
    if _SURROGATE_ESCAPE.search(text) and (found := _unpaired_surrogate(value, field)):
        where, what = found
        raise RecordProblem(f"{what}; remove it or fix the text's encoding", where or None)
    return value


def records_from_chunk(chunk: LineChunk, name: str) -> Iterator[RawRecord]:
    """The exact path: every line on its own, so that each problem is named with its line."""
    start = 0
    for line_no, raw in enumerate(chunk.data.split(b"\n"), start=chunk.first_line):
        at, start = start, start + len(raw) + 1
        if line_no in chunk.too_long:
            yield RawRecord(name, line_no, None, too_big(chunk.too_long[line_no]))
            continue
        if not raw.strip():
            continue
        if len(raw) > MAX_RECORD_BYTES:
            yield RawRecord(name, line_no, None, too_big(len(raw)))
            continue
        try:
            text = raw.decode("utf-8").rstrip("\r")
        except UnicodeDecodeError as exc:
            yield RawRecord(name, line_no, None, f"not UTF-8 at column {exc.start + 1}: "
                            + _not_utf8(chunk.data, at + exc.start))
            continue
        try:
            value = parse_json(text)
        except RecordProblem as exc:
            yield RawRecord(name, line_no, None, exc.message, exc.field)
            continue
        if not isinstance(value, dict):
            yield RawRecord(name, line_no, None, f"expected a JSON object, got {type(value).__name__}")
            continue
        yield RawRecord(name, line_no, value)


# --- a JSON array of records (Alpaca's alpaca_data.json, LLaMA-Factory's data files) ----------------------------

def is_json_array(path: str | Path) -> bool:
    """A ``.json`` file whose first character (after a BOM and whitespace) opens an array; otherwise it is read
    as JSON Lines, which many tools also name ``.json``."""
    with open(path, "rb") as f:
        head = f.read(1 << 16).removeprefix(b"\xef\xbb\xbf").lstrip()
        while not head and (block := f.read(1 << 16)):
            head = block.lstrip()
    return head.startswith(b"[")


_LENIENT = json.JSONDecoder(parse_int=len, parse_float=len, parse_constant=len)
"""Finds where an element ends without judging its values (a NaN, a 5,000-digit number): to report it and go on."""
_SPACE = re.compile(r"\s*")
ARRAY_BATCH_RECORDS = 10_000


def json_array_records(path: str | Path, name: str,
                       chunk_bytes: int = CHUNK_BYTES) -> Iterator[Iterator[RawRecord]]:
    """The records of one JSON array, in batches, each named by the line its element starts on. The file is
    decoded a block at a time and each element parsed by the C decoder where it lies, so memory holds a block
    and one record whatever the file. An element that is not valid JSON ends the reading (an array has no line
    breaks to resume at), and says so; a NaN or a value of the wrong type is one record's error."""
    import codecs

    decoder = codecs.getincrementaldecoder("utf-8")()
    batch: list[RawRecord] = []
    with open(path, "rb") as f:
        block = f.read(chunk_bytes).removeprefix(b"\xef\xbb\xbf")
        refuse_unreadable(block, name)
        buf, pos, line, counted, eof, started, expect = "", 0, 1, 0, False, False, "value"

        def more() -> bool:
            nonlocal buf, pos, line, counted, block, eof
            if eof:
                return False
            line += buf.count("\n", counted, pos)
            raw, block = block, b""
            raw = raw or f.read(chunk_bytes)
            eof = not raw
            try:
                text = decoder.decode(raw, final=eof)
            except UnicodeDecodeError:
                raise _ArrayStop("not UTF-8: re-save the file as UTF-8") from None
            buf, pos, counted = buf[pos:] + text, 0, 0
            return True

        def stop(message: str) -> RawRecord:
            return RawRecord(name, line, None, message + "; the rest of the file was not read (fix it and "
                                                          "upload again)")

        try:
            more()
            while True:
                space = _SPACE.match(buf, pos)
                assert space is not None  # \s* matches anywhere, if only the empty string
                if space.end() == len(buf) and more():
                    continue
                line += buf.count("\n", counted, space.end())
                pos = counted = space.end()
                if pos == len(buf):
                    if expect != "end":
                        batch.append(stop("the JSON array is not closed with ]"))
                    break
                ch = buf[pos]
                if not started:
                    if ch != "[":
                        batch.append(stop("expected a JSON array of records"))
                        break
                    started, pos = True, pos + 1
                    continue
                if expect == "end":
                    batch.append(stop("unexpected text after the JSON array's closing ]"))
                    break
                if ch == "]" and expect in ("value", "comma"):
                    expect, pos = "end", pos + 1
                    continue
                if expect == "comma":
                    if ch != ",":
                        batch.append(stop(f"expected ',' or ']' between records, found {ch!r}"))
                        break
                    expect, pos = "next", pos + 1
                    continue
                record, end = _array_element(buf, pos, name, line)
                if record is None:  # cut off by the block's end, or not JSON
                    if len(buf) - pos > MAX_RECORD_BYTES:
                        # Too big to hold: find its end without parsing it, report it, and go on.
                        element_line, scanner, size = line, _ElementEnd(), 0
                        while (element_end := scanner.feed(buf, pos)) is None:
                            size += len(buf[pos:].encode("utf-8", "surrogatepass"))
                            pos = len(buf)
                            if not more():
                                break
                        if element_end is None:
                            batch.append(stop(f"a record over the {MAX_RECORD_BYTES >> 20} MiB limit that does "
                                              "not end"))
                            break
                        size += len(buf[pos:element_end].encode("utf-8", "surrogatepass"))
                        batch.append(RawRecord(name, element_line, None, too_big(size)))
                        pos, expect = element_end, "comma"
                        continue
                    if more():
                        continue
                    batch.append(stop(str(end)))
                    break
                batch.append(record)
                assert isinstance(end, int)  # a record comes with the offset it ends at, a reason only without one
                pos, expect = end, "comma"
                if len(batch) >= ARRAY_BATCH_RECORDS:
                    yield iter(batch)
                    batch = []
        except _ArrayStop as exc:
            batch.append(stop(str(exc)))
    if batch:
        yield iter(batch)


class _ArrayStop(Exception):
    pass


class _ElementEnd:
    """Where a JSON value ends, found by counting brackets outside strings over text fed block by block: for a
    value too big to parse in memory. Its content is not judged (it is refused for its size)."""

    def __init__(self) -> None:
        self.depth, self.in_string, self.escape_first = 0, False, False

    def feed(self, buf: str, start: int) -> int | None:
        skip = start if self.escape_first else -1
        self.escape_first = False
        for match in _JSON_SPECIAL.finditer(buf, start):
            ch, at = match.group(), match.start()
            if at == skip:
                continue
            if self.in_string:
                if ch == "\\":
                    skip = at + 1
                    self.escape_first = skip == len(buf)
                elif ch == '"':
                    self.in_string = False
                    if self.depth == 0:
                        return at + 1
            elif ch == '"':
                self.in_string = True
            elif ch in "[{":
                self.depth += 1
            else:
                self.depth -= 1
                if self.depth <= 0:
                    return at + 1
        return None


def _array_element(buf: str, pos: int, name: str, line: int) -> tuple[RawRecord | None, int | str]:
    """(record, end) of the element at ``pos``; (None, reason) when it cannot be read whole from ``buf``."""
    end: int | None
    try:
        value, end = _DECODER.raw_decode(buf, pos)
    except RecordProblem as exc:  # NaN or an out-of-range number: skip the element, report it
        try:
            _, end = _LENIENT.raw_decode(buf, pos)
        except (json.JSONDecodeError, RecursionError):
            return None, exc.message
        return RawRecord(name, line, None, exc.message), end
    except json.JSONDecodeError as exc:
        return None, f"invalid JSON: {exc.msg} (line {line + buf.count(chr(10), pos, exc.pos)})"
    except RecursionError:
        end = _ElementEnd().feed(buf, pos)  # no recursion: go on past it, once it is all in the buffer
        if end is None:
            return None, "invalid JSON: nested too deeply"
        return RawRecord(name, line, None, f"invalid JSON: nested too deeply (over {MAX_NESTING} levels of [ and "
                                           "{)"), end
    except ValueError:  # a number past int()'s 4,300 digits
        try:
            _, end = _LENIENT.raw_decode(buf, pos)
        except (json.JSONDecodeError, RecursionError):
            return None, "invalid JSON: a number with more than 4,300 digits"
        return RawRecord(name, line, None, "invalid JSON: a number with more than 4,300 digits"), end
    text = buf[pos:end]
    if len(text) > MAX_RECORD_BYTES // 4 and len(text.encode("utf-8", "surrogatepass")) > MAX_RECORD_BYTES:
        return RawRecord(name, line, None, too_big(len(text.encode("utf-8", "surrogatepass")))), end
    if too_deep(text):
        return RawRecord(name, line, None, f"invalid JSON: nested too deeply (over {MAX_NESTING} levels of [ and "
                                           "{)"), end
    if _SURROGATE_ESCAPE.search(text) and (found := _unpaired_surrogate(value, "")):
        where, what = found
        return RawRecord(name, line, None, f"{what}; remove it or fix the text's encoding", where or None), end
    if not isinstance(value, dict):
        return RawRecord(name, line, None, f"expected a JSON object, got {type(value).__name__}"), end
    return RawRecord(name, line, value), end


# --- CSV and Parquet -------------------------------------------------------------------------------------------

TABLE_BATCH_ROWS = 50_000

TABLE_BATCH_BYTES = 8 << 20
"""The most decoded text and binary one CSV or Parquet frame holds (a row over it is a frame of its own). What
comes after works a frame at a time and its memory follows the frame's text, not its row count: MinHash shingles
take about 16 bytes per byte of text."""

PARQUET_READ_BYTES = 16 << 20
"""About the most one pyarrow read of an upload decodes: its rows are chosen from the row group's decompressed
size, and dictionaries are read as dictionaries (a value repeated is not decoded once per row)."""

PARQUET_READ_ROWS = 64
"""Rows read at a time by ``parquet_frames`` with a byte budget: 64 rows at ``MAX_RECORD_BYTES`` are 64 MiB."""

MAX_EXPANSION = 200
MIN_EXPANSION_CAP = 1 << 30
"""A Parquet upload may decode to at most ``max(MIN_EXPANSION_CAP, MAX_EXPANSION * its size)`` bytes of text.
Text compresses 3 to 10 times; far past that is a decompression bomb (one long value, dictionary-encoded and
compressed, repeated on every row), which would take minutes per kilobyte of the file to validate."""


def _table_records(path: Path, name: str, csv: bool, json_columns: tuple[str, ...]) -> Iterator[Iterator[RawRecord]]:
    """The records of each frame, a frame at a time."""
    if csv and (bad := _first_non_utf8(path, name)):
        # polars would stop at it with no line number; the tenant needs the line and the encoding.
        line, column, why = bad
        yield iter([RawRecord(name, line, None, f"not UTF-8 at column {column}: {why}")])
        return
    if csv:
        for frame, lines in _csv_frames(path, name):
            yield _frame_records(frame, lines, name, json_columns)
    else:
        for frame, lines, dropped in _parquet_frames(path, name):
            yield _frame_records(frame, lines, name, json_columns, dropped)


def _frame_records(frame: pl.DataFrame, lines, name: str, json_columns: tuple[str, ...],
                   dropped: dict[int, tuple[str | None, int]] | None = None) -> Iterator[RawRecord]:
    """``dropped``: line -> (field, bytes) of the rows taken out of ``frame`` (before it) for being over the limit."""
    frame, oversized = _without_oversized(frame)
    dropped = dropped or {}
    pending = sorted(dropped)

    def too_big_before(line: float) -> Iterator[RawRecord]:
        while pending and pending[0] < line:
            field, n_bytes = dropped[pending[0]]
            yield RawRecord(name, pending.pop(0), None, too_big(n_bytes, "value" if field else "record"), field)

    for i, (line, row) in enumerate(zip(lines, _rows(frame, name))):
        yield from too_big_before(line)
        if i in oversized:
            field, n_bytes = oversized[i]
            yield RawRecord(name, line, None, too_big(n_bytes, "value" if field else "record"), field)
            continue
        data = {k: v for k, v in row.items() if v is not None}
        try:
            for column in json_columns:
                if isinstance(data.get(column), str):
                    data[column] = parse_json(data[column], column)
        except RecordProblem as exc:
            yield RawRecord(name, line, None, exc.message, exc.field)
            continue
        yield RawRecord(name, line, data)
    yield from too_big_before(math.inf)


def _packed(pieces: Iterable[tuple[Any, np.ndarray]], max_rows: int,
            max_bytes: int) -> Iterator[list[tuple[Any, int, int]]]:
    """Consecutive rows of ``pieces`` (each given with its rows' sizes in bytes) in runs of at most ``max_rows``
    rows and ``max_bytes`` bytes, a row over ``max_bytes`` on its own: each run a list of (piece, start, stop)."""
    import numpy as np

    run: list[tuple[Any, int, int]] = []
    rows = used = 0
    for piece, sizes in pieces:
        start = 0
        while start < len(sizes):
            sums = np.cumsum(sizes[start:start + max_rows - rows])
            fit = int(np.searchsorted(sums, max_bytes - used, side="right"))
            if fit == 0 and not run:
                fit = 1
            if fit:
                run.append((piece, start, start + fit))
                rows, used, start = rows + fit, used + int(sums[fit - 1]), start + fit
            if start < len(sizes) or rows >= max_rows:
                yield run
                run, rows, used = [], 0, 0
    if run:
        yield run


def _polars_failure(exc: BaseException) -> str:
    """polars' first line, shortened: the rest is advice about its own options, and it may quote the file."""
    first = str(exc).strip().split("\n", 1)[0]
    return first if len(first) <= 200 else first[:200] + "..."


def _csv_frames(path: Path, name: str):
    """Up to ``TABLE_BATCH_ROWS`` records and ``TABLE_BATCH_BYTES`` at a time (polars' own CSV parser,
    streaming), each with the physical line it starts on: a quoted field may hold newlines, so the count carries
    from batch to batch."""
    import polars as pl

    first = 2  # line 1 is the header
    try:
        for frame in pl.scan_csv(path, infer_schema=False).collect_batches(chunk_size=TABLE_BATCH_ROWS):
            _refuse_columns(frame.columns, name)
            lines, first = _csv_start_lines(frame, first)
            # A CSV's text is the file's own bytes, so the frame is no bigger than the upload; splitting it
            # bounds what comes after by the frame's text, as for JSONL chunks.
            for run in _packed([(frame, _frame_row_bytes(frame))], TABLE_BATCH_ROWS, TABLE_BATCH_BYTES):
                ((_, start, stop),) = run
                yield frame.slice(start, stop - start), lines[start:stop]
    except pl.exceptions.NoDataError:
        return  # an empty file holds no records, like an empty JSONL file: "too few valid examples" says so
    except (pl.exceptions.PolarsError, pl.exceptions.PanicException) as exc:
        where = _csv_problem_line(path) or f"polars: {_polars_failure(exc)}"
        raise UnreadableFile(f"{name}: not a well-formed CSV file ({where}); check the quoting and that every "
                             "row has the header's number of fields") from None


def _csv_problem_line(path: Path) -> str | None:
    """Where Python's csv module, reading as strictly as polars, first trips: polars does not say which line."""
    import csv

    with open(path, newline="", encoding="utf-8-sig", errors="replace") as f:
        reader = csv.reader(f, strict=True)
        start = 1  # the line the row being read starts on
        try:
            width = len(next(reader, []))
            while (row := next(reader, None)) is not None:
                if len(row) > width:
                    return f"line {start}: {len(row)} fields where the header has {width}"
                start = reader.line_num + 1
        except csv.Error as exc:
            reason = "a quoted field is never closed" if "unexpected end of data" in str(exc) else str(exc)
            return f"line {start}: {reason}"
    return None


_DUPLICATED = re.compile(r"(.*)_duplicated_\d+")


def _refuse_columns(columns: list[str], name: str) -> None:
    if len(columns) > MAX_COLUMNS:
        raise UnreadableFile(f"{name}: has {len(columns):,} columns, over the {MAX_COLUMNS} an upload may have "
                             "(a shape needs at most six, e.g. prompt and completion): "
                             "check the delimiter and the header")
    seen = set(columns)
    # polars renames a repeated CSV header to "<name>_duplicated_<n>"; Parquet keeps both.
    repeated = [m.group(1) for c in columns if (m := _DUPLICATED.fullmatch(c)) and m.group(1) in seen]
    if repeated or len(seen) < len(columns):
        dup = repeated[0] if repeated else next(c for c in columns if columns.count(c) > 1)
        raise UnreadableFile(f"{name}: column {json.dumps(dup)} appears more than once; each column needs its own name")


def _refuse_field_names(schema, name: str) -> None:
    """Field names that polars cannot tell apart: one with a NUL byte (it reads as the name cut there), or one
    repeated in a struct. Read on, one field's values would be taken for another's."""
    import pyarrow as pa

    def walk(dtype, where: str) -> None:
        if pa.types.is_struct(dtype):
            fields = [dtype.field(i) for i in range(dtype.num_fields)]
            names = [f.name for f in fields]
            bad = next((n for n in names if "\x00" in n), None)
            if bad is None and len(set(names)) < len(names):
                bad = next(n for n in names if names.count(n) > 1)
            if bad is not None:
                why = "holds a NUL byte" if "\x00" in bad else "appears more than once"
                raise UnreadableFile(f"{name}: column {json.dumps(where)}: the field name {json.dumps(bad)} {why}; "
                                     "give every field its own plain name")
            for field in fields:
                walk(field.type, f"{where}.{field.name}")
        elif pa.types.is_list(dtype) or pa.types.is_large_list(dtype) or pa.types.is_fixed_size_list(dtype):
            walk(dtype.value_type, f"{where}[]")
        elif pa.types.is_map(dtype):
            walk(dtype.item_type, f"{where}{{}}")

    for field in schema:
        if "\x00" in field.name:
            raise UnreadableFile(f"{name}: the column name {json.dumps(field.name)} holds a NUL byte; rename it")
        walk(field.type, field.name)


def parquet_frames(path: str | Path, columns: list[str] | None = None, batch_rows: int = 100_000,
                   max_bytes: int | None = None) -> Iterator[pl.DataFrame]:
    """A Parquet file's rows in order, a batch at a time; nothing is read until the first batch is asked for.
    ``max_bytes``: batches of at most that much decoded text too (a row over it is a batch of its own), read
    ``PARQUET_READ_ROWS`` rows at a time."""
    import polars as pl
    import pyarrow as pa
    import pyarrow.parquet as pq

    file = pq.ParquetFile(path)
    if max_bytes is None:
        for batch in file.iter_batches(batch_size=batch_rows, columns=columns):
            yield cast(pl.DataFrame, pl.from_arrow(batch))  # polars types from_arrow loosely: a batch gives a frame
        return
    pieces = ((b, _row_bytes(b)) for b in file.iter_batches(batch_size=PARQUET_READ_ROWS, columns=columns))
    for run in _packed(pieces, batch_rows, max_bytes):
        table = pa.Table.from_batches([b.slice(start, stop - start) for b, start, stop in run])
        yield cast(pl.DataFrame, pl.from_arrow(table))  # polars types from_arrow loosely: a table gives a frame


def _parquet_frames(path: Path, name: str):
    """An upload's rows in frames of at most ``TABLE_BATCH_ROWS`` rows and ``TABLE_BATCH_BYTES`` of decoded text:
    (frame, its rows' 1-based numbers, {number: (field, bytes)} of the rows before them left out for being over
    ``MAX_RECORD_BYTES``). Whatever pyarrow or polars cannot read is a file-level error that names the column
    where it can, and so is a file that decodes to far more than its size (``MAX_EXPANSION``).

    The file is read twice: once to measure it, so that a bomb is refused before any of it is validated, then to
    validate it. pyarrow decodes at hundreds of MB/s and validation runs at a few, so measuring costs little."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    with open(path, "rb") as f:
        refuse_unreadable(f.read(8), name, text=False)
    unreadable = (pa.ArrowException, OSError, ValueError)  # ValueError: e.g. a column name that is not UTF-8
    try:
        file = pq.ParquetFile(path)
        columns = file.schema_arrow.names
        meta = file.metadata
    except FileNotFoundError:
        raise
    except unreadable as exc:
        raise UnreadableFile(f"{name}: not a valid Parquet file ({_polars_failure(exc)}); write it again with "
                             "pyarrow, pandas or polars") from None
    _refuse_columns(columns, name)
    _refuse_field_names(file.schema_arrow, name)
    size = path.stat().st_size
    cap = max(MIN_EXPANSION_CAP, MAX_EXPANSION * size)
    bomb = UnreadableFile(f"{name}: decompresses to more than {cap >> 20:,} MiB of text from {size:,} bytes (over "
                          f"{MAX_EXPANSION} times its size); upload it uncompressed or as JSONL")
    # What the pages say they decompress to (values not in a dictionary are there as they are): no need to read.
    if sum(meta.row_group(g).total_byte_size for g in range(meta.num_row_groups)) > cap:
        raise bomb
    plan = _read_plan(path, file)
    total = 0
    for _, _, sizes in _parquet_batches(plan, name, unreadable, check=False):
        total += int(sizes.sum())
        if total > cap:
            raise bomb

    dropped: dict[int, tuple[str | None, int]] = {}

    def kept_rows():
        for first, batch, sizes in _parquet_batches(plan, name, unreadable, check=True):
            rows = sizes.sum(axis=0)
            over = rows > MAX_RECORD_BYTES
            lines = np.arange(first, first + batch.num_rows)
            for i in np.flatnonzero(over):  # left out before polars sees them: they may be dictionaries yet
                column = int(sizes[:, i].argmax())
                widest = int(sizes[column, i])
                dropped[int(lines[i])] = ((batch.schema.names[column], widest) if widest > MAX_RECORD_BYTES
                                          else (None, int(rows[i])))
            if over.any():
                batch, lines, rows = batch.filter(pa.array(~over)), lines[~over], rows[~over]
            yield (batch, lines), rows

    # Decoded, a slice at a time, to the file's types without dictionaries: polars would make a dictionary
    # Categorical, and keeps a Categorical's values for the life of the process (a tenant's text, long after).
    target = _decoded_schema(file.schema_arrow)
    for run in _packed(kept_rows(), TABLE_BATCH_ROWS, TABLE_BATCH_BYTES):
        lines = np.concatenate([lines[start:stop] for (_, lines), start, stop in run]).tolist()
        try:
            table = pa.Table.from_batches([_decoded(batch.slice(start, stop - start), target)
                                           for (batch, _), start, stop in run], target)
        except unreadable as exc:
            raise UnreadableFile(f"{name}: cannot read the rows from row {lines[0]:,} on ({_polars_failure(exc)}); "
                                 "the file may be truncated or corrupt") from None
        before = {line: dropped.pop(line) for line in [n for n in dropped if n < lines[-1]]}
        yield _to_polars(table, name), lines, before
    if dropped:  # rows over the limit after the last row kept, or every row
        yield _to_polars(target.empty_table(), name), [], dropped


def _read_plan(path: Path, file) -> list[tuple[Any, int]]:
    """For each row group, the reader and the rows per read that keep a read to about ``PARQUET_READ_BYTES``.

    pyarrow decodes a read whole, and a dictionary-encoded value once for every row that holds it: 64 rows of
    one 20 MB value (a file of 900 bytes) would take 1.3 GB before their size could be checked. So a group's
    rows are bounded by its decompressed size (values not in a dictionary are in the pages as they are) plus its
    largest dictionary value times the dictionary values per row, read from one row with the dictionaries kept.
    Where even one row may be over the budget, the group is read with its dictionaries kept, so that no value is
    decoded before its size is known (not for every group: then pyarrow keeps every distinct value of a column
    chunk written plain, in memory while the group is read)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    meta, schema = file.metadata, file.schema
    text = [i for i in range(meta.num_columns) if schema.column(i).physical_type == "BYTE_ARRAY"
            and schema.column(i).logical_type.type in ("STRING", "ENUM", "JSON", "BSON", "NONE")]
    kept = None
    plan = []
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        n = max(group.num_rows, 1)
        row_bytes = plain = group.total_byte_size / n
        encoded = [i for i in text if group.column(i).has_dictionary_page]
        if encoded:
            try:
                kept = kept or pq.ParquetFile(path, read_dictionary=[schema.column(i).path for i in text])
                probe = next(kept.iter_batches(batch_size=1, row_groups=[g]), None)
                largest = max((_largest_dictionary_value(c) for c in probe.columns), default=0) if probe else 0
            except (pa.ArrowException, OSError, ValueError):
                plan.append((file, 1))  # cannot tell: row by row (the reading proper says what is wrong)
                continue
            row_bytes += largest * sum(group.column(i).num_values for i in encoded) / n
        if encoded and row_bytes > PARQUET_READ_BYTES:
            plan.append((kept, max(1, min(TABLE_BATCH_ROWS, int(PARQUET_READ_BYTES // max(plain, 1))))))
        else:
            plan.append((file, max(1, min(TABLE_BATCH_ROWS, int(PARQUET_READ_BYTES // max(row_bytes, 1))))))
    return plan


def _largest_dictionary_value(array) -> int:
    import pyarrow as pa

    if isinstance(array, pa.DictionaryArray):
        return int(_value_bytes(array.dictionary).max(initial=0))
    if isinstance(array, pa.StructArray):
        return max((_largest_dictionary_value(f) for f in array.flatten()), default=0)
    if isinstance(array, pa.ListArray | pa.LargeListArray | pa.FixedSizeListArray | pa.ListViewArray
                  | pa.LargeListViewArray):
        return _largest_dictionary_value(array.values)
    return 0


def _parquet_batches(plan: list[tuple[Any, int]], name: str, unreadable: tuple, check: bool):
    """(first row number, batch, its values' sizes in bytes: one row per column) for every row group, read as
    ``plan`` says. ``check``: validate the values too (e.g. strings that are not UTF-8, which polars would panic
    on)."""
    import numpy as np

    first = 1
    for g, (reader, rows) in enumerate(plan):
        batches = None
        while True:
            try:
                batches = batches or reader.iter_batches(batch_size=rows, row_groups=[g])
                batch = next(batches, None)
                if batch is None:
                    break
                if check:
                    batch.validate(full=True)
                sizes = (np.stack([_value_bytes(c) for c in batch.columns]) if batch.num_columns
                         else np.zeros((1, batch.num_rows), dtype=np.int64))
            except unreadable as exc:
                raise UnreadableFile(f"{name}: cannot read the rows from row {first:,} on "
                                     f"({_polars_failure(exc)}); the file may be truncated or corrupt") from None
            yield first, batch, sizes
            first += batch.num_rows


def _decoded_type(kind):
    """``kind`` with every dictionary replaced by its values' type."""
    import pyarrow as pa

    if pa.types.is_dictionary(kind):
        return _decoded_type(kind.value_type)
    if pa.types.is_struct(kind):
        return pa.struct([field.with_type(_decoded_type(field.type)) for field in kind])
    if pa.types.is_map(kind):
        return pa.map_(kind.key_field.with_type(_decoded_type(kind.key_type)),
                       kind.item_field.with_type(_decoded_type(kind.item_type)))
    if pa.types.is_fixed_size_list(kind):
        return pa.list_(kind.value_field.with_type(_decoded_type(kind.value_type)), kind.list_size)
    for test, make in ((pa.types.is_list, pa.list_), (pa.types.is_large_list, pa.large_list),
                       (pa.types.is_list_view, pa.list_view), (pa.types.is_large_list_view, pa.large_list_view)):
        if test(kind):
            return make(kind.value_field.with_type(_decoded_type(kind.value_type)))
    return kind


def _decoded_schema(schema):
    import pyarrow as pa

    return pa.schema([field.with_type(_decoded_type(field.type)) for field in schema])


def _decoded(batch, target):
    """``batch`` with the types of ``target``: its dictionaries decoded. Only the columns that differ are cast
    (pyarrow's cast of a batch rebuilds every column, and gets some, e.g. lists of nulls, wrong)."""
    import pyarrow as pa

    if batch.schema == target:
        return batch
    columns = [c if c.type == f.type else c.cast(f.type) for c, f in zip(batch.columns, target)]
    return pa.RecordBatch.from_arrays(columns, schema=target)


def _row_bytes(batch) -> np.ndarray:
    """Each row's decoded text and binary, in bytes."""
    import numpy as np

    sizes = np.zeros(batch.num_rows, dtype=np.int64)
    for column in batch.columns:
        sizes += _value_bytes(column)
    return sizes


def _value_bytes(array) -> np.ndarray:
    """Each value's text and binary in bytes, through lists, maps, structs and dictionaries (a list's elements
    ``LIST_SLOT_BYTES`` each besides), without decoding them (``nbytes`` counts a dictionary once, however many
    rows repeat it); other values count as nothing, as in ``_cell_bytes``. Read from the buffers: a compute call
    per column of every batch would cost more than the reading."""
    import numpy as np
    import pyarrow as pa

    kind, n = array.type, len(array)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if isinstance(array, pa.ExtensionArray):
        return _value_bytes(array.storage)
    if pa.types.is_dictionary(kind):
        per_value = _value_bytes(array.dictionary)
        if not len(per_value):
            return np.zeros(n, dtype=np.int64)
        indices = _own_buffer(array.indices, 1, kind.index_type.to_pandas_dtype(), n)
        sizes = per_value[np.clip(indices, 0, len(per_value) - 1)]  # a null's index may be anything
    elif pa.types.is_string(kind) or pa.types.is_binary(kind):
        sizes = np.diff(_own_buffer(array, 1, np.int32, n + 1))
    elif pa.types.is_large_string(kind) or pa.types.is_large_binary(kind):
        sizes = np.diff(_own_buffer(array, 1, np.int64, n + 1))
    elif pa.types.is_string_view(kind) or pa.types.is_binary_view(kind):
        # Each view is 16 bytes, its length first.
        sizes = np.frombuffer(array.buffers()[1], dtype=np.int32).reshape(-1, 4)[array.offset:array.offset + n, 0]
    elif pa.types.is_fixed_size_binary(kind):
        sizes = np.full(n, kind.byte_width, dtype=np.int64)
    elif isinstance(array, pa.ListViewArray | pa.LargeListViewArray):
        width = np.int32 if isinstance(array, pa.ListViewArray) else np.int64
        sums = np.concatenate([[0], np.cumsum(_value_bytes(array.values))])
        offsets, lengths = _own_buffer(array, 1, width, n), _own_buffer(array, 2, width, n)
        valid = _valid(array)
        offsets, lengths = (offsets, lengths) if valid is None else (offsets * valid, lengths * valid)
        sizes = sums[offsets + lengths] - sums[offsets] + LIST_SLOT_BYTES * lengths
    elif isinstance(array, pa.FixedSizeListArray):
        sums = np.concatenate([[0], np.cumsum(_value_bytes(array.values))])
        starts = (array.offset + np.arange(n)) * kind.list_size
        sizes = sums[starts + kind.list_size] - sums[starts] + LIST_SLOT_BYTES * kind.list_size
    elif isinstance(array, pa.ListArray | pa.LargeListArray):  # and maps, lists of key-value structs
        width = np.int32 if isinstance(array, pa.ListArray) else np.int64
        sums = np.concatenate([[0], np.cumsum(_value_bytes(array.values))])
        offsets = _own_buffer(array, 1, width, n + 1)
        sizes = sums[offsets[1:]] - sums[offsets[:-1]] + LIST_SLOT_BYTES * np.diff(offsets)
    elif isinstance(array, pa.StructArray):
        sizes = sum((_value_bytes(f) for f in array.flatten()), np.zeros(n, dtype=np.int64))
    else:
        return np.zeros(n, dtype=np.int64)
    valid = _valid(array)
    return (sizes if valid is None else sizes * valid).astype(np.int64)


def _own_buffer(array, index: int, dtype, count: int) -> np.ndarray:
    """``count`` values of the array's ``index``-th buffer (1: offsets, indices or views), from its offset on."""
    import numpy as np

    return np.frombuffer(array.buffers()[index], dtype=dtype)[array.offset:array.offset + count]


def _valid(array) -> np.ndarray | None:
    """Which values are not null (None: all); from the validity bitmap, as compute's is_valid is slow on small
    batches."""
    import numpy as np

    if not array.null_count:
        return None
    bits = np.unpackbits(np.frombuffer(array.buffers()[0], dtype=np.uint8), bitorder="little")
    return bits[array.offset:array.offset + len(array)].astype(bool)


def _to_polars(batch, name: str) -> pl.DataFrame:
    import polars as pl
    import pyarrow as pa

    failures = (pl.exceptions.PolarsError, pl.exceptions.PanicException, pa.ArrowException, RecursionError)
    try:
        return cast(pl.DataFrame, pl.from_arrow(batch))  # polars types from_arrow loosely: a batch gives a frame
    except failures as exc:
        reason = _polars_failure(exc)
    for field in batch.schema:  # name the column for the tenant: convert them one at a time
        try:
            pl.from_arrow(batch.select([field.name]))
        except failures:
            reason = (f"column {json.dumps(field.name)} has type {field.type}, which cannot be read; "
                      "store text as strings")
            break
    raise UnreadableFile(f"{name}: {reason}")


def _rows(frame: pl.DataFrame, name: str) -> Iterator[dict]:
    import polars as pl

    try:
        yield from frame.iter_rows(named=True)
    except (pl.exceptions.PolarsError, pl.exceptions.PanicException, ValueError, OverflowError) as exc:
        raise UnreadableFile(f"{name}: a value cannot be read ({_polars_failure(exc)})") from None


def _cell_bytes(expr: pl.Expr, dtype: PolarsDataType) -> pl.Expr:
    """The bytes a cell holds, through lists and structs; fixed-size values count as nothing, a list's elements
    ``LIST_SLOT_BYTES`` each."""
    import polars as pl

    if dtype == pl.String:
        size = expr.str.len_bytes()
    elif isinstance(dtype, pl.Categorical | pl.Enum):
        size = expr.cat.len_bytes()  # from the categories: casting would decode a repeated value once per row
    elif dtype == pl.Binary:
        size = expr.bin.size()
    elif isinstance(dtype, pl.Array):
        return _cell_bytes(expr.arr.to_list(), pl.List(dtype.inner))
    elif isinstance(dtype, pl.List):
        size = expr.list.eval(_cell_bytes(pl.element(), dtype.inner)).list.sum() + LIST_SLOT_BYTES * expr.list.len()
    elif isinstance(dtype, pl.Struct) and dtype.fields:
        size = pl.sum_horizontal(_cell_bytes(expr.struct.field(f.name), f.dtype) for f in dtype.fields)
    else:
        return pl.lit(0, pl.Int64)
    return size.cast(pl.Int64).fill_null(0)


def _frame_row_bytes(frame: pl.DataFrame) -> np.ndarray:
    import numpy as np
    import polars as pl

    if frame.width == 0:
        return np.zeros(frame.height, dtype=np.int64)
    sizes = frame.select(pl.sum_horizontal(_cell_bytes(pl.col(c), t) for c, t in frame.schema.items()))
    return sizes.to_series().to_numpy().astype(np.int64)


def _without_oversized(frame: pl.DataFrame) -> tuple[pl.DataFrame, dict[int, tuple[str | None, int]]]:
    """The frame with its rows over ``MAX_RECORD_BYTES`` emptied, and for each such row index the column at fault
    (None when no single value is over the limit, only their sum) and its bytes."""
    import polars as pl

    if frame.width == 0:
        return frame, {}
    sizes = frame.select(_cell_bytes(pl.col(c), t).alias(c) for c, t in frame.schema.items())
    over = (sizes.select(pl.sum_horizontal(pl.all())).to_series() > MAX_RECORD_BYTES).arg_true().to_list()
    if not over:
        return frame, {}
    oversized: dict[int, tuple[str | None, int]] = {}
    for index in over:
        row = sizes.row(index, named=True)
        column, n_bytes = max(row.items(), key=lambda item: item[1])
        oversized[index] = (column, n_bytes) if n_bytes > MAX_RECORD_BYTES else (None, sum(row.values()))
    keep = ~pl.int_range(pl.len()).is_in(list(oversized))
    return frame.select(pl.when(keep).then(pl.col(c)).alias(c) for c in frame.columns), oversized


def _first_non_utf8(path: Path, name: str) -> tuple[int, int, str] | None:
    """The 1-based line and column of a file's first byte that is not UTF-8, read chunk by chunk, and what the
    file looks like instead."""
    for chunk in iter_line_chunks(path, name=name):
        try:
            chunk.data.decode("utf-8")
        except UnicodeDecodeError as exc:
            before = chunk.data[:exc.start]
            return (chunk.first_line + before.count(b"\n"), exc.start - (before.rfind(b"\n") + 1) + 1,
                    _not_utf8(chunk.data, exc.start))
    return None


def _csv_start_lines(frame, first: int) -> tuple[list[int], int]:
    """The physical line each record starts on, the first starting on ``first``, and the line after the last."""
    import polars as pl

    if frame.width == 0 or frame.height == 0:
        return [], first
    newlines = pl.sum_horizontal(pl.col(c).fill_null("").str.count_matches("\n") for c in frame.columns)
    spans = frame.select((newlines + 1).alias("span"))["span"]
    return (spans.cum_sum() - spans + first).to_list(), first + int(spans.sum())
