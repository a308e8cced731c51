"""The catalog's two backends side by side: a DuckDB file (the default) and PostgreSQL, in one run.

Each backend gets a catalog of its own: a DuckDB file in a temporary folder, and a fresh schema on the
PostgreSQL server at ``--postgres`` (dropped at the end; skipped, with a note, if no server answers). Measures:

  1. single-process latency of each store operation, ``--reps`` times after a few untimed ones (a process's
     first connection creates or checks the schema), p50 and p95 in ms:
       - ``ledger.record``: a new run id each time (a write-once insert);
       - ``ledger.charged_hours(month)``: the quota read, over the rows just recorded;
       - ``leases.acquire+release``: one device of an 8-device pool claimed, then released (two transactions);
       - ``registry.register``: a new adapter each time;
       - ``registry.list(tenant)``: one tenant's adapters with ``--list-rows`` of them present (topped up
         untimed after the timed registers);
  2. throughput: N processes at once (``--processes``, "spawn" start; bench/catalog_worker.py), each running
     ``--ops-per-process`` operations of a mixed loop in turn: ledger.record, a lease acquired and released
     (one operation, as above), registry.register. All start at one instant, after each has imported and
     connected; ops/s is all processes' operations over the wall time until the last one finishes.

Every operation opens its own connection and is one transaction, as the platform's stores do: this measures
the stores, not the bare engines. The DuckDB file lets one process in at a time, and a process that finds it
locked retries every 0.2 s (``ftpipe.catalog.duckdb_backend``), with ``lock_timeout_s=300`` here so that it
waits rather than fails; PostgreSQL takes writers at once and serialises only claims on one pool.

How to read the table: the ratio column is PostgreSQL's figure over DuckDB's. For latencies (ms, lower is
better) a ratio under 1 means PostgreSQL is faster; for throughput (ops/s, higher is better) a ratio over 1
means PostgreSQL is faster. Both backends run on this machine, so with few cores the processes compete with
the PostgreSQL server for CPU. Figures go to bench/results/catalog.json.

    .venv/bin/python -m bench.catalog [--reps 50] [--list-rows 200] [--processes 1,4,8] [--ops-per-process 100]
                                      [--postgres postgresql://postgres@127.0.0.1:5432/postgres] [--no-postgres]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from bench.catalog_worker import MONTH, POOL, adapter, stores, usage, work

REPO_ROOT = Path(__file__).resolve().parents[1]

DEFAULT_POSTGRES = "postgresql://postgres@127.0.0.1:5432/postgres"
BACKENDS = ("DuckDB", "PostgreSQL")
WARMUP = 3
LIST_TENANT = "listed"
OPERATIONS = ("ledger.record", "ledger.charged_hours", "leases.acquire+release", "registry.register",
              "registry.list(tenant)")


def with_schema(url: str, schema: str) -> str:
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "schema"]
    return urlunsplit(parts._replace(query=urlencode(query + [("schema", schema)])))


def postgres_version(url: str) -> str | None:
    """The server's ``SELECT version()``, or None when no server answers at ``url``."""
    try:
        import psycopg

        from ftpipe.catalog.postgres_backend import split_url

        with psycopg.connect(split_url(url)[0], connect_timeout=3) as con:
            return con.execute("SELECT version()").fetchone()[0]
    except Exception as exc:  # no server, refused, no such database: the backend is skipped
        print(f"note: no PostgreSQL server answers at {url} ({type(exc).__name__}: {str(exc).strip()[:200]}); "
              "PostgreSQL is skipped")
        return None


def percentiles_ms(seconds: list[float]) -> dict:
    ms = sorted(s * 1000 for s in seconds)
    p95 = statistics.quantiles(ms, n=20, method="inclusive")[18] if len(ms) > 1 else ms[0]
    return {"n": len(ms), "p50_ms": round(statistics.median(ms), 2), "p95_ms": round(p95, 2),
            "mean_ms": round(statistics.fmean(ms), 2)}


def latencies(location: str, reps: int, list_rows: int) -> dict:
    ledger, leases, registry = stores(location)
    for i in range(WARMUP):  # untimed: the first connection creates the catalog (DuckDB) or schema (PostgreSQL)
        ledger.record(usage(f"warm-rec-{i}", "warmup"))
        ledger.charged_hours(MONTH)
        leases.acquire(POOL, 8, 1, f"warm-lease-{i}")
        leases.release(f"warm-lease-{i}")
        registry.register(adapter(f"warm-adapter-{i}", "warmup"))
        registry.list("warmup")

    def timed(fn) -> dict:
        seconds = []
        for i in range(reps):
            start = time.perf_counter()
            fn(i)
            seconds.append(time.perf_counter() - start)
        return percentiles_ms(seconds)

    def lease(i: int) -> None:
        leases.acquire(POOL, 8, 1, f"lat-lease-{i}")
        leases.release(f"lat-lease-{i}")

    out = {
        "ledger.record": timed(lambda i: ledger.record(usage(f"lat-rec-{i}", f"tenant{i % 20:02d}"))),
        "ledger.charged_hours": timed(lambda i: ledger.charged_hours(MONTH)),
        "leases.acquire+release": timed(lease),
        "registry.register": timed(lambda i: registry.register(
            adapter(f"lat-adapter-{i}", LIST_TENANT if i < list_rows else "other"))),
    }
    for i in range(reps, list_rows):  # untimed: the listed tenant's rows up to --list-rows
        registry.register(adapter(f"fill-adapter-{i}", LIST_TENANT))
    listed = len(registry.list(LIST_TENANT))
    out["registry.list(tenant)"] = {**timed(lambda i: registry.list(LIST_TENANT)), "rows": listed}
    return out


def throughput(location: str, processes: int, ops: int, tag: str) -> dict:
    context = multiprocessing.get_context("spawn")
    ready, results, go = context.Queue(), context.Queue(), context.Event()
    # As many devices as processes: each holds at most one at a time, so no claim is refused, but all claims
    # are on one pool, so they take its lock in turn.
    workers = [context.Process(target=work, args=(location, f"{tag}-n{processes}-p{k}", ops, processes, ready, go,
                                                  results)) for k in range(processes)]
    for w in workers:
        w.start()
    for _ in workers:  # every process has imported and connected: then they all start at once
        ready.get(timeout=300)
    start = time.perf_counter()
    go.set()
    outcomes = [results.get(timeout=900) for _ in workers]
    wall = time.perf_counter() - start
    for w in workers:
        w.join(timeout=60)
    errors = [f"{o[0]}: {o[1]}" for o in outcomes if isinstance(o[1], str)]
    done = [o for o in outcomes if not isinstance(o[1], str)]
    op_seconds = [s for o in done for s in o[2]]
    figures = {"processes": processes, "ops": sum(len(o[2]) for o in done), "wall_s": round(wall, 2),
               "ops_per_s": round(sum(len(o[2]) for o in done) / wall, 1), "errors": errors}
    if op_seconds:
        figures["per_op_under_load"] = percentiles_ms(op_seconds)
    return figures


def fmt_ratio(pg: float | None, duck: float | None) -> str:
    return f"{pg / duck:.2f}" if pg is not None and duck else "–"


def table(results: dict, processes: list[int], ops: int) -> str:
    duck, pg = results["backends"].get("DuckDB"), results["backends"].get("PostgreSQL")
    rows = ["| measure | DuckDB | PostgreSQL | PostgreSQL / DuckDB |", "|---|---|---|---|"]
    for name in OPERATIONS:
        cells = []
        for side in (duck, pg):
            if side is None:
                cells.append("skipped")
            else:
                lat = side["latency"][name]
                cells.append(f"{lat['p50_ms']:.2f} / {lat['p95_ms']:.2f}")
        ratio = "–" if pg is None or duck is None else " / ".join(
            fmt_ratio(pg["latency"][name][k], duck["latency"][name][k]) for k in ("p50_ms", "p95_ms"))
        rows.append(f"| {name}, p50 / p95 ms | {cells[0]} | {cells[1]} | {ratio} |")
    for n in processes:
        cells, values = [], []
        for side in (duck, pg):
            if side is None:
                cells.append("skipped")
                values.append(None)
                continue
            run = side["throughput"][str(n)]
            value = run["ops_per_s"] if not run["errors"] else None
            values.append(value)
            cells.append(f"{run['ops_per_s']:.1f}" + (f" ({len(run['errors'])} errors)" if run["errors"] else ""))
        rows.append(f"| mixed ops/s, {n} process{'es' if n > 1 else ''} x {ops} ops | {cells[0]} | {cells[1]} | "
                    f"{fmt_ratio(values[1], values[0])} |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=50, help="timed calls of each operation (single process)")
    parser.add_argument("--list-rows", type=int, default=200, help="the listed tenant's adapters")
    parser.add_argument("--processes", default="1,4,8", help="concurrent process counts, comma-separated")
    parser.add_argument("--ops-per-process", type=int, default=100)
    parser.add_argument("--postgres", default=os.environ.get("FTPIPE_BENCH_POSTGRES", DEFAULT_POSTGRES),
                        help="a PostgreSQL URL; the benchmark works in a fresh schema there and drops it")
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()
    processes = [int(n) for n in args.processes.split(",") if n.strip()]

    import duckdb
    import psycopg

    began = time.perf_counter()
    pg_version = None if args.no_postgres else postgres_version(args.postgres)
    print(f"CPUs: {os.cpu_count()} (usable by this process: {len(os.sched_getaffinity(0))})")
    print(f"duckdb {duckdb.__version__}, psycopg {psycopg.__version__}"
          + (f" (libpq {psycopg.pq.version()})" if hasattr(psycopg, "pq") else ""))
    print(f"PostgreSQL: {pg_version or 'skipped'}")
    results = {"cpus": os.cpu_count(), "duckdb": duckdb.__version__, "psycopg": psycopg.__version__,
               "postgresql": pg_version, "reps": args.reps, "list_rows": args.list_rows,
               "ops_per_process": args.ops_per_process, "backends": {}}

    from ftpipe.catalog.postgres_backend import PostgresBackend

    with tempfile.TemporaryDirectory() as tmp:
        locations = {"DuckDB": str(Path(tmp) / "catalog.duckdb")}
        if pg_version:
            locations["PostgreSQL"] = with_schema(args.postgres, f"ftpipe_bench_{os.getpid()}_{uuid.uuid4().hex[:6]}")
        try:
            # Backends take turns at each step, so that a change in the machine's load falls on both.
            for backend, location in locations.items():
                print(f"[{backend}] latency, {args.reps} calls of each operation ...", flush=True)
                results["backends"][backend] = {"latency": latencies(location, args.reps, args.list_rows),
                                                "throughput": {}}
            for n in processes:
                for backend, location in locations.items():
                    print(f"[{backend}] {n} process(es) x {args.ops_per_process} mixed operations ...", flush=True)
                    run = throughput(location, n, args.ops_per_process, "tp")
                    results["backends"][backend]["throughput"][str(n)] = run
                    for error in run["errors"]:
                        print(f"    error: {error}")
        finally:
            if "PostgreSQL" in locations:
                PostgresBackend(locations["PostgreSQL"]).drop()

    results["wall_s"] = round(time.perf_counter() - began, 1)
    out = REPO_ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / "catalog.json").write_text(json.dumps(results, indent=2))
    print()
    print(table(results, processes, args.ops_per_process))
    print(f"\n{results['wall_s']} s in all; figures in {out / 'catalog.json'}")


if __name__ == "__main__":
    main()
