"""Data-quality warnings: things that do not make a dataset invalid but that a tenant should fix.

Each check works on the normalized frame (``ftpipe.data.normalize``) and returns a ``DataWarning`` with the
count and the file/line locations, so that the report can point at the exact rows.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import polars as pl

from ftpipe.data.pii import PREFILTER as PII_PREFILTER
from ftpipe.data.pii import find_pii

MESSAGE_DTYPE = pl.List(pl.Struct({"role": pl.String, "content": pl.String}))
MAX_LOCATIONS = 20


@dataclass
class DataWarning:
    kind: str
    message: str
    count: int
    locations: list[str] = field(default_factory=list)
    samples: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        where = ", ".join(self.locations[:MAX_LOCATIONS])
        more = f" and {len(self.locations) - MAX_LOCATIONS} more" if len(self.locations) > MAX_LOCATIONS else ""
        return f"{self.message} ({self.count}): {where}{more}"


def with_text(frame: pl.DataFrame) -> pl.DataFrame:
    """Add ``text`` (all message contents) and ``prompt_key`` (everything before the last answer)."""
    valid = frame.filter(pl.col("messages").is_not_null() & pl.col("problem").is_null())
    decoded = valid.with_columns(pl.col("messages").str.json_decode(MESSAGE_DTYPE).alias("_m"))
    return decoded.with_columns(
        pl.col("_m").list.eval(pl.element().struct.field("content").fill_null("")).list.join("\n").alias("text"),
        pl.col("_m").list.head(pl.col("_m").list.len() - 1)
        .list.eval(pl.element().struct.field("content").fill_null("")).list.join("\n").alias("prompt_key"),
    ).drop("_m")


def _where(rows: pl.DataFrame) -> list[str]:
    return [f"{f} line {n}" for f, n in rows.select("source_file", "line").iter_rows()]


def exact_duplicates(frame: pl.DataFrame) -> DataWarning | None:
    dups = frame.filter(pl.col("messages").is_duplicated()).sort("source_file", "line")
    if dups.is_empty():
        return None
    groups = dups.group_by("messages", maintain_order=True).agg(pl.col("line"), pl.col("source_file").first())
    extra = dups.height - groups.height
    locations = [f"{f} lines {', '.join(map(str, lines))}" for lines, f in groups.select("line", "source_file").iter_rows()]
    return DataWarning("exact_duplicates", "exact duplicate examples (copies beyond the first)", extra, locations)


def near_duplicates(frame: pl.DataFrame, threshold: float = 0.8, num_perm: int = 64) -> DataWarning | None:
    """Pairs of different examples whose word 3-shingles have a Jaccard similarity above ``threshold``."""
    from datasketch import MinHash, MinHashLSH

    unique = frame.unique(subset="messages", keep="first", maintain_order=True)
    if unique.height < 2:
        return None
    lsh = MinHashLSH(threshold=threshold, num_perm=num_perm)
    sketches = {}
    for i, (text, source_file, line) in enumerate(unique.select("text", "source_file", "line").iter_rows()):
        words = re.findall(r"\w+", text.lower())
        shingles = {" ".join(words[j:j + 3]).encode() for j in range(max(1, len(words) - 2))}
        m = MinHash(num_perm=num_perm, seed=1)
        m.update_batch(list(shingles))
        key = f"{source_file} line {line}"
        for other in lsh.query(m):
            if m.jaccard(sketches[other]) >= threshold:
                sketches.setdefault("__pairs__", []).append(f"{key} ~ {other}")
        lsh.insert(key, m)
        sketches[key] = m
    pairs = sketches.get("__pairs__", [])
    if not pairs:
        return None
    return DataWarning("near_duplicates", f"near-duplicate pairs (MinHash Jaccard >= {threshold})", len(pairs), pairs)


def pii(frame: pl.DataFrame) -> DataWarning | None:
    # One vectorized pass over the serialized messages finds the candidate rows (a JSON string is the text
    # with quotes and control characters escaped, which no pattern needs); only those are decoded and go
    # through the exact patterns and checksums in Python.
    candidates = frame.filter(pl.col("messages").str.contains(PII_PREFILTER))
    locations, samples, total = [], [], 0
    for messages, source_file, line in candidates.select("messages", "source_file", "line").iter_rows():
        text = "\n".join(m.get("content") or "" for m in json.loads(messages))
        found = find_pii(text)
        if found:
            total += len(found)
            kinds = sorted({k for k, _ in found})
            locations.append(f"{source_file} line {line} ({', '.join(kinds)})")
            samples += [f"{source_file} line {line}: {k} {masked}" for k, masked in found]
    if not total:
        return None
    return DataWarning("pii", "possible personal data or secrets (values masked)", total, locations, samples[:MAX_LOCATIONS])


def length_outliers(frame: pl.DataFrame, k: float = 3.0, min_rows: int = 20) -> DataWarning | None:
    """Examples whose character length lies beyond k interquartile ranges from the middle half."""
    if frame.height < min_rows:
        return None
    lengths = frame["text"].str.len_chars()
    q1, q3 = lengths.quantile(0.25), lengths.quantile(0.75)
    spread = max(q3 - q1, 1.0)
    low, high = q1 - k * spread, q3 + k * spread
    outliers = frame.filter((lengths < low) | (lengths > high)).sort("source_file", "line")
    if outliers.is_empty():
        return None
    return DataWarning("length_outliers", f"length outliers (outside {max(low, 0):.0f}-{high:.0f} characters)",
                       outliers.height, _where(outliers))


def train_eval_overlap(frame: pl.DataFrame) -> DataWarning | None:
    """Evaluation examples whose prompt also appears in the training data: their scores would flatter."""
    train = frame.filter(pl.col("role") == "train").select("prompt_key")
    evals = frame.filter(pl.col("role") == "eval")
    if train.is_empty() or evals.is_empty():
        return None
    overlap = evals.join(train.unique(), on="prompt_key", how="semi").sort("source_file", "line")
    if overlap.is_empty():
        return None
    return DataWarning("train_eval_overlap", "evaluation examples whose prompt is also in the training data",
                       overlap.height, _where(overlap))


def data_warnings(frame: pl.DataFrame) -> list[DataWarning]:
    rows = with_text(frame)
    checks = [exact_duplicates, near_duplicates, pii, length_outliers, train_eval_overlap]
    return [w for w in (check(rows) for check in checks) if w is not None]


WARNING_KINDS = ("exact_duplicates", "near_duplicates", "pii", "length_outliers", "train_eval_overlap")
