"""Data-quality warnings: things that do not make a dataset invalid but that a tenant should fix.

``WarningCollector`` takes the normalized frame (``ftpipe.data.normalize``) chunk by chunk: what is local to a
row (PII) is found in the chunk; for what compares rows (duplicates, near-duplicates, length outliers,
train/eval overlap) it keeps a few fixed-width columns per row (hashes, lengths, locations, MinHash sketches),
so that a 10M-row upload is checked in bounded memory. Each warning has the count
and the file/line locations, so that the report can point at the exact rows.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from ftpipe.data.minhash import THRESHOLD, NearDuplicateFinder, exact_jaccard
from ftpipe.data.pii import PREFILTER as PII_PREFILTER
from ftpipe.data.pii import find_pii

MESSAGE_DTYPE = pl.List(pl.Struct({"role": pl.String, "content": pl.String}))
MAX_LOCATIONS = 20
MAX_KEPT_LOCATIONS = 1_000
"""Locations kept per warning (all are counted): the report lists the first ones."""


@dataclass
class DataWarning:
    kind: str
    message: str
    count: int
    locations: list[str] = field(default_factory=list)
    samples: list[str] = field(default_factory=list)
    more_locations: int = 0
    """Locations beyond the ``MAX_KEPT_LOCATIONS`` kept."""

    def __str__(self) -> str:
        where = ", ".join(self.locations[:MAX_LOCATIONS])
        beyond = max(len(self.locations) - MAX_LOCATIONS, 0) + self.more_locations
        more = f" and {beyond} more" if beyond > 0 else ""
        return f"{self.message} ({self.count}): {where}{more}"


def capped_warning(kind: str, message: str, count: int, locations: list[str], samples: list[str] | None = None,
                   n_locations: int | None = None) -> DataWarning:
    """``n_locations``: how many locations there are, when the caller built only the first of them."""
    kept = locations[:MAX_KEPT_LOCATIONS]
    more = (len(locations) if n_locations is None else n_locations) - len(kept)
    return DataWarning(kind, message, count, kept, (samples or [])[:MAX_LOCATIONS], more)


VALID_ROWS = pl.col("messages").is_not_null() & pl.col("problem").is_null()
"""The rows the warnings look at: those that were read and normalized (the others are errors)."""
WARNING_COLUMNS = ["messages", "problem"]
"""What the warnings read back from the examples once the stream has passed (``WarningCollector.finish``)."""


def with_text(frame: pl.DataFrame) -> pl.DataFrame:
    """The valid rows, with ``text`` (all message contents) and ``prompt_key`` (the conversation before the last
    answer, without system messages, in lower case with runs of white space as one space: the same question
    with another system prompt or spacing is the same question)."""
    valid = frame.filter(VALID_ROWS)
    decoded = valid.with_columns(pl.col("messages").str.json_decode(MESSAGE_DTYPE).alias("_m"))
    return decoded.with_columns(
        pl.col("_m").list.eval(pl.element().struct.field("content").fill_null("")).list.join("\n").alias("text"),
        pl.col("_m").list.head(pl.col("_m").list.len() - 1)
        .list.eval(pl.element().filter(pl.element().struct.field("role") != "system")
                   .struct.field("content").fill_null("")).list.join("\n")
        .str.to_lowercase().str.replace_all(r"\s+", " ").str.strip_chars().alias("prompt_key"),
    ).drop("_m")


def rows_warning(kind: str, message: str, rows: pl.DataFrame) -> DataWarning:
    """A warning with one location per row of ``rows`` (sorted by file and line): all counted, the first kept."""
    where = [f"{f} line {n}" for f, n in rows.head(MAX_KEPT_LOCATIONS).select("source_file", "line").iter_rows()]
    return capped_warning(kind, message, rows.height, where, n_locations=rows.height)


FEATURES_SCHEMA = {"source_file": pl.String, "line": pl.Int64, "role": pl.String, "key": pl.UInt64,
                   "prompt": pl.UInt64, "length": pl.UInt32}


DUPLICATE_KEY = pl.col("messages").hash(seed=11).alias("key")
"""Equal for exact copies: the normalized messages, hashed."""


def row_features(rows: pl.DataFrame) -> pl.DataFrame:
    """What the cross-row checks need of each valid row: 50-odd bytes instead of the whole example."""
    return rows.select(
        "source_file", "line", "role", DUPLICATE_KEY,
        pl.col("prompt_key").hash(seed=13).alias("prompt"),
        pl.col("text").str.len_chars().alias("length"),
    )


def exact_duplicates(features: pl.DataFrame) -> DataWarning | None:
    dups = features.filter(pl.col("key").is_duplicated()).sort("source_file", "line")
    if dups.is_empty():
        return None
    groups = dups.group_by("key", maintain_order=True).agg(pl.col("line"), pl.col("source_file").first())
    extra = dups.height - groups.height
    locations = [f"{f} lines {', '.join(map(str, lines))}"
                 for lines, f in groups.head(MAX_KEPT_LOCATIONS).select("line", "source_file").iter_rows()]
    return capped_warning("exact_duplicates", "exact duplicate examples (copies beyond the first)", extra,
                          locations, n_locations=groups.height)


def near_duplicates(features: pl.DataFrame, candidates: np.ndarray,
                    examples: Iterable[pl.DataFrame]) -> DataWarning | None:
    """``candidates``: (row, earlier row) indices into ``features`` from MinHash; each example is reported once,
    against the earliest example whose exact shingle Jaccard reaches the threshold. Exact copies are the other
    warning's. ``examples``: the frames fed to the collector, in the same order, read again for the candidates'
    texts (a streamed upload keeps only their hashes)."""
    keys = features["key"].to_numpy()
    candidates = candidates[keys[candidates[:, 0]] != keys[candidates[:, 1]]] if len(candidates) else candidates
    if len(candidates) == 0:
        return None
    pairs = _confirmed(candidates, examples)
    if not pairs:
        return None
    shown = pairs[:MAX_KEPT_LOCATIONS]
    where = _locations_of(features, {row for pair in shown for row in pair})
    locations = [f"{where[a]} ~ {where[b]}" for a, b in shown]
    return capped_warning("near_duplicates", f"near-duplicates of an earlier example (Jaccard >= {THRESHOLD})",
                          len(pairs), locations, n_locations=len(pairs))


def _confirmed(candidates: np.ndarray, examples: Iterable[pl.DataFrame]) -> list[tuple[int, int]]:
    """For each row, its first candidate (candidates are sorted by row, then earlier row) whose exact Jaccard
    reaches the threshold. One pass over the examples in the order fed: a row's text is held only until the last
    candidate that needs it, so memory follows the candidates, not the upload."""
    earlier_of: dict[int, list[int]] = {}
    last_needed: dict[int, int] = {}
    for a, b in candidates.tolist():
        earlier_of.setdefault(a, []).append(b)
        last_needed[b] = a  # rows ascend: the last assignment is the last use
    wanted = pl.Series(np.unique(candidates))
    held: dict[int, str] = {}
    confirmed, offset = [], 0
    for frame in examples:
        valid = frame.filter(VALID_ROWS)
        rows = valid.with_row_index("_row", offset=offset).filter(pl.col("_row").is_in(wanted.implode()))
        offset += valid.height
        for row, text in with_text(rows).select("_row", "text").iter_rows():
            earlier = earlier_of.get(row, ())
            match = next((b for b in earlier if exact_jaccard(text, held[b]) >= THRESHOLD), None)
            if match is not None:
                confirmed.append((row, match))
            for b in earlier:
                if last_needed[b] == row:
                    del held[b]
            if row in last_needed:
                held[row] = text
    return confirmed


def _locations_of(features: pl.DataFrame, rows: set[int]) -> dict[int, str]:
    picked = features.with_row_index().filter(pl.col("index").is_in(sorted(rows)))
    return {i: f"{f} line {n}" for i, f, n in picked.select("index", "source_file", "line").iter_rows()}


def length_outliers(features: pl.DataFrame, k: float = 3.0, min_rows: int = 20) -> DataWarning | None:
    """Examples whose character length lies beyond k interquartile ranges from the middle half."""
    if features.height < min_rows:
        return None
    lengths = features["length"]
    q1, q3 = lengths.quantile(0.25), lengths.quantile(0.75)
    assert q1 is not None and q3 is not None  # None only for no values, and there are min_rows lengths, never null
    spread = max(q3 - q1, 1.0)
    low, high = q1 - k * spread, q3 + k * spread
    outliers = features.filter((pl.col("length") < low) | (pl.col("length") > high)).sort("source_file", "line")
    if outliers.is_empty():
        return None
    return rows_warning("length_outliers", f"length outliers (outside {max(low, 0):.0f}-{high:.0f} characters)",
                        outliers)


def train_eval_overlap(features: pl.DataFrame) -> DataWarning | None:
    """Evaluation examples whose prompt also appears in the training data: their scores would flatter."""
    train = features.filter(pl.col("role") == "train").select("prompt")
    evals = features.filter(pl.col("role") == "eval")
    if train.is_empty() or evals.is_empty():
        return None
    overlap = evals.join(train.unique(), on="prompt", how="semi").sort("source_file", "line")
    if overlap.is_empty():
        return None
    return rows_warning("train_eval_overlap", "evaluation examples whose prompt is also in the training data",
                        overlap)


class WarningCollector:
    """Every warning kind over a dataset fed in chunks (``add``), in the order the files are read."""

    def __init__(self):
        self._features: list[pl.DataFrame] = []
        self._near = NearDuplicateFinder()
        self._pii_locations: list[str] = []
        self._pii_samples: list[str] = []
        self._pii_total = 0
        self._pii_more = 0

    def add(self, frame: pl.DataFrame) -> None:
        rows = with_text(frame)
        self._features.append(row_features(rows))
        self._near.add(rows["text"])
        self.collect_pii(rows)

    def collect_pii(self, rows: pl.DataFrame) -> None:
        # One vectorized pass over the serialized messages finds the candidate rows (a JSON string is the text
        # with quotes and control characters escaped, which no pattern needs); only those are decoded and go
        # through the exact patterns and checksums in Python.
        candidates = rows.filter(pl.col("messages").str.contains(PII_PREFILTER))
        for messages, source_file, line in candidates.select("messages", "source_file", "line").iter_rows():
            text = "\n".join(m.get("content") or "" for m in json.loads(messages))
            found = find_pii(text)
            if found:
                self._pii_total += len(found)
                kinds = sorted({k for k, _ in found})
                if len(self._pii_locations) < MAX_KEPT_LOCATIONS:
                    self._pii_locations.append(f"{source_file} line {line} ({', '.join(kinds)})")
                else:
                    self._pii_more += 1
                if len(self._pii_samples) < MAX_LOCATIONS:
                    self._pii_samples += [f"{source_file} line {line}: {k} {masked}" for k, masked in found]

    def pii(self) -> DataWarning | None:
        if not self._pii_total:
            return None
        return capped_warning("pii", "possible personal data or secrets (values masked)", self._pii_total,
                              self._pii_locations, self._pii_samples, len(self._pii_locations) + self._pii_more)

    def finish(self, examples: Iterable[pl.DataFrame]) -> list[DataWarning]:
        """``examples``: the frames fed to ``add``, in the same order (read back from the written file when
        streamed); read only if MinHash found candidates."""
        features = pl.concat(self._features, rechunk=False) if self._features else pl.DataFrame(schema=FEATURES_SCHEMA)
        near = near_duplicates(features, self._near.candidates(), examples)
        found = [exact_duplicates(features), near, self.pii(), length_outliers(features), train_eval_overlap(features)]
        return [w for w in found if w is not None]


def data_warnings(frame: pl.DataFrame) -> list[DataWarning]:
    collector = WarningCollector()
    collector.add(frame)
    return collector.finish([frame])


WARNING_KINDS = ("exact_duplicates", "near_duplicates", "pii", "length_outliers", "train_eval_overlap")
