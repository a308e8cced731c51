"""Deterministic train / holdout split by content hash: the same data always splits the same way."""

from __future__ import annotations

import hashlib

import polars as pl

_BUCKETS = 10_000


def assign_split(frame: pl.DataFrame, holdout_fraction: float) -> pl.DataFrame:
    """Add a ``split`` column; identical examples always land on the same side, so no duplicate leaks.

    SHA-256 rather than polars' hash, which may change between polars versions: a split must never move.
    """
    threshold = int(holdout_fraction * _BUCKETS)
    sha256, from_bytes = hashlib.sha256, int.from_bytes  # local names: this loop runs once per example
    held_out = [m is not None and from_bytes(sha256(m.encode()).digest()[:8], "big") % _BUCKETS < threshold
                for m in frame["messages"].to_list()]
    return frame.with_columns(pl.when(pl.Series(held_out, dtype=pl.Boolean)).then(pl.lit("holdout"))
                              .otherwise(pl.lit("train")).alias("split"))
