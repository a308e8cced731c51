"""The catalog file under concurrent first use: several run workers and sensors may open a catalog that
does not exist yet in the same instant."""

import multiprocessing
import time

import duckdb

from tests.helpers.catalog_open import open_at


def test_processes_creating_the_catalog_at_once_all_open_it(tmp_path):
    # Before catalog files were published whole, 10 such processes corrupted the new file in about one try
    # in ten ("exists, but it is not a valid DuckDB database file"), so several tries are made.
    context = multiprocessing.get_context("fork")
    for attempt in range(6):
        db = tmp_path / f"catalog-{attempt}.duckdb"
        queue = context.Queue()
        start_at = time.time() + 0.3
        workers = [context.Process(target=open_at, args=(str(db), start_at, queue)) for _ in range(10)]
        for w in workers:
            w.start()
        outcomes = [queue.get(timeout=120) for _ in workers]
        for w in workers:
            w.join(timeout=60)
        assert outcomes == ["ok"] * 10, outcomes
        assert duckdb.connect(str(db)).execute("SELECT count(*) FROM opened").fetchone() == (10,)
        assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".new")] == []
