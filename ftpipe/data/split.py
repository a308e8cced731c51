"""Deterministic train / holdout split by content hash: the same data always splits the same way."""

from __future__ import annotations

import hashlib

import polars as pl

_BUCKETS = 10_000


def holdout_bucket(messages_json: str) -> int:
    return int.from_bytes(hashlib.sha256(messages_json.encode("utf-8")).digest()[:8], "big") % _BUCKETS


def assign_split(frame: pl.DataFrame, holdout_fraction: float) -> pl.DataFrame:
    """Add a ``split`` column; identical examples always land on the same side, so no duplicate leaks."""
    threshold = int(holdout_fraction * _BUCKETS)
    buckets = [holdout_bucket(m) if m is not None else _BUCKETS for m in frame["messages"]]
    return frame.with_columns(
        pl.Series("split", ["holdout" if b < threshold else "train" for b in buckets], dtype=pl.String)
    )
