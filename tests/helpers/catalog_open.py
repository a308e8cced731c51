"""Opening a catalog file in its own process, for the concurrent-creation test (imports no Dagster)."""

import time
from pathlib import Path

from ftpipe.catalog.duckdb_backend import connect


def open_at(db: str, start_at: float, queue) -> None:
    while time.time() < start_at:  # all processes open the new file in the same instant
        pass
    try:
        with connect(Path(db), "CREATE TABLE IF NOT EXISTS opened (pid INTEGER)") as con:
            con.execute("INSERT INTO opened VALUES (1)")
        queue.put("ok")
    except Exception as exc:  # reported so that the test shows the cause
        queue.put(repr(exc))
