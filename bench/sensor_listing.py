"""What one upload-sensor tick costs to list the landing zone: the old whole-zone listing against the new scan.

The landing zone only grows: every finished job leaves its manifest and data in ``jobs/`` and its reports in
``results/``, and API uploads and billing statements pile up beside them. The upload sensor used to list the
whole ``tenants/`` prefix every tick (5 s), so a tick's cost grew with every file ever written; it now calls
``ftpipe.landing_scan.scan``, which lists the tenant folders with a delimiter and then each tenant's ``jobs/``
folder only, ``--budget`` keys at a time (``SCAN_BUDGET``: one S3 request), going on next tick from where it
stopped.

The landing zone: ``--tenants`` tenants, each with a few API files (``--api-files``) and one billing statement,
and J finished jobs in all, spread evenly over the tenants, for each J of ``--jobs`` (ascending; the zone is
topped up from one size to the next, never rebuilt). A finished job is ``jobs/{job}/manifest.yaml`` and
``jobs/{job}/train.jsonl`` plus ``--reports`` files under ``results/{job}/``. Nothing new is uploaded while
measuring: every tick finds only what it found before, the sensor's usual case.

Measured for each J, on two stores:
  - ``s3``: a bucket on moto's ThreadedMotoServer, started here on loopback (port 0): real HTTP, real
    ListObjectsV2 requests, counted with a botocore ``before-call.s3.ListObjectsV2`` hook on the client;
  - ``local``: a ``LocalObjectStore`` in a temporary folder (time only: there are no requests to count).
  1. old: ``store.list("tenants/")``, then the manifest keys picked out with ``match_manifest_key``
     (mean over ``--reps`` calls, after one untimed call);
  2. new: consecutive ``scan(store, positions, budget)`` calls, each with the positions the previous one
     returned, from none: as many as a full sweep of every tenant's ``jobs/`` folder takes, and at least
     ``--min-ticks``; the mean time and requests per tick, and the ticks a full sweep took (each tenant's
     ``jobs/`` folder holds 2 keys per job, so with the default budget a sweep takes one tick until a tenant
     has 500 jobs; try ``--budget 100`` to see sweeps take several ticks). One untimed scan comes first.
  The old and the new calls take turns, so that a change in the machine's load falls on both. Both must find
  every manifest (checked), and the new scan's manifests are counted over its first full sweep.

How to read the table: ``old/new`` is the old figure over the new one, for time and for requests (over 1: the
new scan is cheaper). Old requests are one per 1,000 keys in the whole zone; new ones are one per tenant (per
``budget`` keys of its ``jobs/`` folder) plus one per 1,000 tenants, whatever the zone holds. With few jobs per
tenant the old listing can be the cheaper one: the new scan pays a request per tenant every tick.

Caveat on the S3 times: moto answers every ListObjectsV2 request by going through every key in the bucket
(``moto.s3.models.list_objects``) and sorting those under the prefix, and it runs in this process, sharing
its CPU and GIL with the client. So on moto even a request for one small ``jobs/`` folder costs time in
proportion to the whole bucket, which real S3 does not do: the S3 request counts carry over to real S3, the S3
times do not (they understate the new scan's advantage). The local times are the file system's own.

    .venv/bin/python -m bench.sensor_listing [--tenants 20] [--jobs 200,1000,4000] [--reports 8]
                                             [--api-files 5] [--reps 3] [--min-ticks 3] [--budget 1000]
                                             [--stores s3,local] [--fill-threads 8]

Figures go to bench/results/sensor_listing.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]

# moto's server and the boto3 clients read these; set before any client is created.
os.environ["AWS_ACCESS_KEY_ID"] = "testing"
os.environ["AWS_SECRET_ACCESS_KEY"] = "testing"
os.environ["AWS_DEFAULT_REGION"] = "us-east-1"

from ftpipe.landing import (  # noqa: E402
    api_file_key,
    job_file_key,
    manifest_key,
    match_manifest_key,
    results_key,
    statement_key,
)
from ftpipe.landing_scan import SCAN_BUDGET, scan  # noqa: E402
from ftpipe.objectstore import LocalObjectStore, S3ObjectStore  # noqa: E402

BUCKET = "landing-bench"
MANIFEST = b"base_model: tiny\ndataset: train.jsonl\nmethod: lora\nobjective: sft\n"
DATA = b'{"prompt": "q", "completion": "a"}\n'
REPORT = b"# report\n"
STATEMENT = b"# statement\n"
MONTH = "2026-01"


def tenant_name(n: int) -> str:
    return f"tenant{n:03d}"


def job_name(n: int) -> str:
    return f"job-{n:05d}"


def jobs_per_tenant(total: int, tenants: int) -> list[int]:
    """``total`` jobs spread evenly: the first ``total % tenants`` tenants get one more."""
    return [total // tenants + (1 if t < total % tenants else 0) for t in range(tenants)]


def tenant_extras(tenant: str, api_files: int) -> list[tuple[str, bytes]]:
    return ([(api_file_key(tenant, f"file-{n:03d}", "train.jsonl"), DATA) for n in range(api_files)]
            + [(statement_key(tenant, MONTH), STATEMENT)])


def job_objects(tenant: str, job: str, reports: int) -> list[tuple[str, bytes]]:
    return ([(job_file_key(tenant, job, "train.jsonl"), DATA), (manifest_key(tenant, job), MANIFEST)]
            + [(results_key(tenant, job, f"report-{r}.md"), REPORT) for r in range(reports)])


def top_up(have: list[int], want: list[int], reports: int) -> list[tuple[str, bytes]]:
    """The objects that take each tenant from ``have`` finished jobs to ``want``."""
    return [obj for t, (a, b) in enumerate(zip(have, want)) for j in range(a, b)
            for obj in job_objects(tenant_name(t), job_name(j), reports)]


class Landing:
    """One store under test, with its ListObjectsV2 requests counted (S3 only)."""

    def __init__(self, kind: str, store, fill_threads: int):
        self.kind, self.store, self.fill_threads, self.requests = kind, store, fill_threads, 0
        if isinstance(store, S3ObjectStore):
            store.client.meta.events.register("before-call.s3.ListObjectsV2", self._count)

    def _count(self, **_):
        self.requests += 1

    def write(self, objects: list[tuple[str, bytes]]) -> None:
        if isinstance(self.store, S3ObjectStore):
            client, bucket, prefix = self.store.client, self.store.bucket, self.store.prefix

            def put(obj):
                client.put_object(Bucket=bucket, Key=prefix + obj[0], Body=obj[1])

            with ThreadPoolExecutor(self.fill_threads) as pool:
                for _ in pool.map(put, objects, chunksize=64):
                    pass
        else:
            for key, data in objects:
                self.store.write_bytes(key, data)


def old_tick(landing: Landing) -> tuple[float, int, int]:
    """(seconds, requests, manifests found): the whole zone listed, manifests picked out."""
    before, start = landing.requests, time.perf_counter()
    manifests = [o.key for o in landing.store.list("tenants/") if match_manifest_key(o.key)]
    return time.perf_counter() - start, landing.requests - before, len(manifests)


def new_tick(landing: Landing, positions: dict[str, str], budget: int):
    before, start = landing.requests, time.perf_counter()
    found = scan(landing.store, positions, budget)
    return time.perf_counter() - start, landing.requests - before, found


def measure(landing: Landing, jobs: int, tenants: int, reps: int, min_ticks: int, budget: int) -> dict:
    # Untimed first calls: connections opened, caches warm.
    _, _, n = old_tick(landing)
    assert n == jobs, f"{landing.kind}: the old listing found {n} manifests, not {jobs}"
    new_tick(landing, {}, budget)

    old_s, old_req = [], []
    new_s, new_req = [], []
    positions: dict[str, str] = {}
    swept: set[str] = set()
    manifests: set[str] = set()
    sweep_ticks = None
    while len(old_s) < reps or sweep_ticks is None or len(new_s) < min_ticks:
        if len(old_s) < reps:
            s, r, n = old_tick(landing)
            assert n == jobs, f"{landing.kind}: the old listing found {n} manifests, not {jobs}"
            old_s.append(s)
            old_req.append(r)
        if sweep_ticks is None or len(new_s) < min_ticks:
            s, r, found = new_tick(landing, positions, budget)
            new_s.append(s)
            new_req.append(r)
            assert not found.unreadable and not found.invalid, (found.unreadable, found.invalid)
            positions = found.positions()
            if sweep_ticks is None:
                manifests.update(o.key for o in found.objects if match_manifest_key(o.key))
                swept.update(t for t, sweep in found.sweeps.items() if sweep.end is None)
                if len(swept) == tenants:
                    sweep_ticks = len(new_s)
                    assert len(manifests) == jobs, \
                        f"{landing.kind}: a full sweep found {len(manifests)} manifests, not {jobs}"
    counted = isinstance(landing.store, S3ObjectStore)
    figures = {
        "old_ms": round(statistics.mean(old_s) * 1000, 2),
        "old_ms_all": [round(s * 1000, 2) for s in old_s],
        "old_requests": statistics.mean(old_req) if counted else None,
        "new_ms_per_tick": round(statistics.mean(new_s) * 1000, 2),
        "new_ms_all": [round(s * 1000, 2) for s in new_s],
        "new_requests_per_tick": round(statistics.mean(new_req), 2) if counted else None,
        "new_ticks": len(new_s),
        "sweep_ticks": sweep_ticks,
    }
    figures["time_ratio"] = round(figures["old_ms"] / figures["new_ms_per_tick"], 2)
    figures["requests_ratio"] = (round(figures["old_requests"] / figures["new_requests_per_tick"], 2)
                                 if counted else None)
    return figures


def table(results: dict) -> str:
    lines = [
        ("| jobs (J) | keys in zone | keys per tenant jobs/ | store | old ms | old requests | new ms/tick "
         "| new requests/tick | sweep ticks | old/new time | old/new requests |"),
        "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in results["rows"]:
        def fmt(v):
            return "n/a" if v is None else f"{v:g}" if isinstance(v, float) else str(v)

        lines.append(
            f"| {row['jobs']} | {row['keys']} | {row['max_jobs_folder_keys']} | {row['store']} "
            f"| {row['old_ms']:.1f} | {fmt(row['old_requests'])} | {row['new_ms_per_tick']:.1f} "
            f"| {fmt(row['new_requests_per_tick'])} | {row['sweep_ticks']} | {row['time_ratio']:.2f} "
            f"| {fmt(row['requests_ratio'])} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tenants", type=int, default=20)
    parser.add_argument("--jobs", default="200,1000,4000", help="total finished jobs, comma-separated sizes")
    parser.add_argument("--reports", type=int, default=8, help="report files under results/{job}/ per job")
    parser.add_argument("--api-files", type=int, default=5, help="API uploads under files/ per tenant")
    parser.add_argument("--reps", type=int, default=3, help="timed calls of the old listing per size")
    parser.add_argument("--min-ticks", type=int, default=3, help="at least this many timed new-scan ticks")
    parser.add_argument("--budget", type=int, default=SCAN_BUDGET, help="keys per tenant per tick")
    parser.add_argument("--stores", default="s3,local", help="s3, local or both, comma-separated")
    parser.add_argument("--fill-threads", type=int, default=8, help="concurrent put_object calls filling S3")
    args = parser.parse_args()
    sizes = sorted({int(n) for n in args.jobs.split(",") if n.strip()})
    kinds = [k.strip() for k in args.stores.split(",") if k.strip()]

    import boto3
    import moto
    from botocore.config import Config

    began = time.perf_counter()
    print(f"CPUs: {os.cpu_count()} (usable by this process: {len(os.sched_getaffinity(0))}); "
          f"boto3 {boto3.__version__}, moto {moto.__version__}")
    results = {"cpus": os.cpu_count(), "boto3": boto3.__version__, "moto": moto.__version__,
               "tenants": args.tenants, "reports_per_job": args.reports, "api_files_per_tenant": args.api_files,
               "budget": args.budget, "reps": args.reps, "min_ticks": args.min_ticks, "fill_s": {}, "rows": []}
    server = None
    with tempfile.TemporaryDirectory() as tmp:
        landings: dict[str, Landing] = {}
        try:
            if "s3" in kinds:
                from moto.server import ThreadedMotoServer

                logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a line per request otherwise
                server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
                server.start()
                host, port = server.get_host_and_port()
                client = boto3.client("s3", endpoint_url=f"http://{host}:{port}",
                                      config=Config(max_pool_connections=max(10, args.fill_threads)))
                client.create_bucket(Bucket=BUCKET)
                landings["s3"] = Landing("s3", S3ObjectStore(client, BUCKET, "landing"), args.fill_threads)
            if "local" in kinds:
                landings["local"] = Landing("local", LocalObjectStore(Path(tmp) / "landing"), args.fill_threads)

            have = [0] * args.tenants
            extras = [obj for t in range(args.tenants) for obj in tenant_extras(tenant_name(t), args.api_files)]
            for size in sizes:
                want = jobs_per_tenant(size, args.tenants)
                objects = (extras if size == sizes[0] else []) + top_up(have, want, args.reports)
                keys_total = len(extras) + sum(want) * (2 + args.reports)
                for kind, landing in landings.items():
                    start = time.perf_counter()
                    landing.write(objects)
                    fill_s = time.perf_counter() - start
                    results["fill_s"].setdefault(kind, {})[str(size)] = round(fill_s, 1)
                    print(f"[{kind}] J={size}: wrote {len(objects)} objects in {fill_s:.1f} s "
                          f"({len(objects) / max(fill_s, 1e-9):.0f}/s); zone holds {keys_total} keys; measuring ...",
                          flush=True)
                    row = {"jobs": size, "keys": keys_total, "max_jobs_folder_keys": 2 * max(want),
                           "store": kind, **measure(landing, size, args.tenants, args.reps, args.min_ticks,
                                                    args.budget)}
                    results["rows"].append(row)
                    print(f"    old {row['old_ms']:.1f} ms ({row['old_requests']} requests), "
                          f"new {row['new_ms_per_tick']:.1f} ms/tick ({row['new_requests_per_tick']} requests), "
                          f"sweep {row['sweep_ticks']} tick(s)", flush=True)
                have = want
        finally:
            if server is not None:
                server.stop()

    results["wall_s"] = round(time.perf_counter() - began, 1)
    out = REPO_ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / "sensor_listing.json").write_text(json.dumps(results, indent=2))
    print()
    print(f"{args.tenants} tenants, {args.reports} reports per job, {args.api_files} API files and 1 statement "
          f"per tenant; budget {args.budget} keys per tenant per tick")
    print(table(results))
    print(f"\n{results['wall_s']} s in all; figures in {out / 'sensor_listing.json'}")


if __name__ == "__main__":
    main()
