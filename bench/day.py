"""A day of the platform's traffic through the real intake and the real queue, against an ideal scheduler.

The seed's day: 500 jobs in 24 hours, 70% small LoRA (15 min on 1 GPU), 20% medium (2 h on 2 GPUs), 9% LoRA
of a 70B model (4 h on 4 GPUs), 1% full fine-tune (24 h on 32 GPUs), durations +-20%; from premium, standard
and free tenants; arrivals bursty (a business-hours peak, and a third of them in batches of 3-12 from one
tenant). Each job is uploaded to a local landing zone as a tenant would (manifest last); the real upload
sensor admits it and asks for a run; the job's GPU run (its CPU stage, which holds no GPU slot, is taken as
instant) is queued on a Dagster instance on PostgreSQL whose run coordinator is the platform's (the
QueuedRunCoordinator with the production tag limits of
docs/deploy/dagster.postgres.yaml: one run per tenant at a time, one free-tier run at a time, a pool's slots
per pool); the coordinator's own dequeue daemon (QueuedRunCoordinatorDaemon.run_iteration) launches runs; and
the launcher, instead of training, lets a launched run finish when its simulated duration is over.

Time is simulated in steps of ``--step`` seconds: each step uploads what arrived, ticks the sensor once,
ends the runs that are due, and runs one dequeue iteration. Queue wait is from the run's creation (the
sensor's tick) to its launch, in simulated time; the run lists and their tags live in PostgreSQL as in
production. The day's jobs arrive within 24 h; the simulation goes on until the queue drains (at most
``--max-hours``), and the table says how many runs were still waiting when the day ended.

The cluster (``CLUSTER``): 256 H100s in fixed-size slots, h100x1 x 64, h100x2 x 16, h100x4 x 16, h100x32 x 3.
Each job class runs in its own pool (the sensor's routing would send every tiny-model job to one GPU, so the
bench sets the pool from the job's class; everything else in the run's tags is the sensor's).

The ideal bound beside it: a scheduler with no slot sizes and no per-tenant or per-tier limits, whose GPUs
are one fungible set, finishes the day's work no sooner than total GPU-hours / GPUs, and keeps every GPU busy
while work waits. Where the real queue falls short of it, the table shows which pool and which limit hold.

    make base-model   # the sensor admits manifests against the built-in tiny model
    .venv/bin/python -m bench.day [--jobs 500] [--step 60] [--seed 7] [--postgres URL]

Needs PostgreSQL (default postgresql://postgres@127.0.0.1:5432/postgres: a database is created and dropped).
Figures go to bench/results/day.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("FTPIPE_MODEL_CACHE", str(REPO_ROOT / ".cache" / "models"))
for _var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ[_var] = "1"

import yaml  # noqa: E402

HOUR = 3600.0
DAY = 24 * HOUR


@dataclass(frozen=True)
class JobClass:
    name: str
    share: float
    hours: float
    gpus: int
    pool: str


JOB_CLASSES = (JobClass("small-lora", 0.70, 0.25, 1, "h100x1"), JobClass("medium", 0.20, 2.0, 2, "h100x2"),
               JobClass("lora-70b", 0.09, 4.0, 4, "h100x4"), JobClass("full-ft", 0.01, 24.0, 32, "h100x32"))
CLUSTER = {"h100x1": (1, 64), "h100x2": (2, 16), "h100x4": (4, 16), "h100x32": (32, 3)}  # pool: (GPUs a slot, slots)
TIERS = {"premium": (10, 0.30), "standard": (30, 0.50), "free": (60, 0.20)}  # tier: (tenants, share of jobs)
SLA = {"premium": 5 * 60, "standard": HOUR}
BATCH_PROBABILITY = 1 / 16
"""Of the upload events, the share that is a batch (3-12 jobs, 7.5 on average): a third of the jobs."""
REFUSED_AFTER = 600.0
"""A job the sensor has not queued this long after it arrived was refused (the table counts it)."""


@dataclass
class Job:
    n: int
    tenant: str
    tier: str
    kind: JobClass
    duration: float
    arrives: float
    queued: float | None = None
    launched: float | None = None
    ends: float | None = None
    run_id: str | None = None
    tags: dict = field(default_factory=dict)
    left: float | None = None          # training time still to do: the duration, less what ran before a preemption
    intervals: list = field(default_factory=list)  # (start, end) of each run that held a slot
    requeued: list = field(default_factory=list)   # when each preemption put it back in the queue
    requeue_waits: list = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"j{self.n:05d}"


def day_of_jobs(count: int, seed: int) -> list[Job]:
    """Arrival times over 24 h: twice the rate 08:00-18:00; a third of the jobs come in a tenant's batch."""
    rng = random.Random(seed)
    tenants = {tier: [f"{tier[0]}{i:02d}" for i in range(n)] for tier, (n, _) in TIERS.items()}

    def moment() -> float:
        while True:
            t = rng.uniform(0, DAY)
            if rng.random() < (1.0 if 8 * HOUR <= t < 18 * HOUR else 0.5):
                return t

    jobs: list[Job] = []
    while len(jobs) < count:
        tier = rng.choices(list(TIERS), weights=[share for _, share in TIERS.values()])[0]
        tenant = rng.choice(tenants[tier])
        start = moment()
        batch = rng.randint(3, 12) if rng.random() < BATCH_PROBABILITY else 1
        for k in range(min(batch, count - len(jobs))):
            kind = rng.choices(JOB_CLASSES, weights=[c.share for c in JOB_CLASSES])[0]
            jobs.append(Job(len(jobs), tenant, tier, kind, kind.hours * HOUR * rng.uniform(0.8, 1.2),
                            min(DAY - 1, start + 20 * k)))
    jobs.sort(key=lambda j: j.arrives)
    for n, job in enumerate(jobs):
        job.n = n
    return jobs


def platform_file(folder: Path) -> Path:
    """The repo's tenants.yaml with the simulated cluster's pools and the day's tenants."""
    config = yaml.safe_load((REPO_ROOT / "tenants.yaml").read_text())
    config["pools"] = {name: {"gpu": "H100-80GB", "gpu_memory_gb": 80, "gpus_per_slot": gpus, "slots": slots,
                              "peak_tflops": 989, "mfu": 0.35, "price_per_gpu_hour": 2.5}
                       for name, (gpus, slots) in CLUSTER.items()}
    config["default_pool"] = "h100x1"
    config["tenants"] = {f"{tier[0]}{i:02d}": {"tier": tier} for tier, (n, _) in TIERS.items() for i in range(n)}
    path = folder / "tenants.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


TENANT_LIMIT: int | None = None
"""``--tenant-limit``: runs a tenant may have at once, instead of production's."""


def coordinator_config() -> dict:
    """Production's limits (one run per tenant, the free tier's share), with the simulated cluster's pools."""
    from partitions.run_tags import KIND_TAG, POOL_TAG, TENANT_TAG

    production = yaml.safe_load((REPO_ROOT / "docs/deploy/dagster.postgres.yaml").read_text())["run_coordinator"]
    limits = [lim for lim in production["config"]["tag_concurrency_limits"] if lim["key"] not in (POOL_TAG, KIND_TAG)]
    slots = sum(s for _, s in CLUSTER.values())
    limits += [{"key": POOL_TAG, "value": name, "limit": s} for name, (_, s) in CLUSTER.items()]
    if TENANT_LIMIT is not None:
        limits = [{**lim, "limit": TENANT_LIMIT} if lim["key"] == TENANT_TAG else lim for lim in limits]
    return {**production, "config": {**production["config"], "max_concurrent_runs": slots,
                                     "tag_concurrency_limits": limits}}


def blocking_limit(tags: dict, running: list[dict], limits: list[dict]) -> str:
    """Which of the coordinator's limits holds a queued run back now (the first that is full), as the table
    names it; "none" when none is full (the run waits for the next dequeue, or behind higher priorities)."""
    for limit in limits:
        key, value = limit["key"], limit["value"]
        if key not in tags or (isinstance(value, str) and tags[key] != value):
            continue
        if sum(r.get(key) == tags[key] for r in running) >= limit["limit"]:
            name = key.split("/")[-1]
            return (f"per-{name} limit ({limit['limit']})" if isinstance(value, dict)
                    else f"{name} {tags[key]} at its limit ({limit['limit']})")
    return "none"


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def queued_jobs(jobs: list[Job]) -> list[Job]:
    """The jobs whose run waits in the queue now: admitted, and neither running nor done."""
    return [j for j in jobs if j.queued is not None and j.ends is None]


def simulate(jobs: list[Job], pg_admin: str, step: float, max_hours: float) -> dict:
    import psycopg
    from dagster import (
        DagsterEvent,
        DagsterEventType,
        DagsterRunStatus,
        build_run_status_sensor_context,
        build_sensor_context,
        instance_for_test,
    )
    from dagster._core.test_utils import create_run_for_test, create_test_daemon_workspace_context
    from dagster._core.workspace.load_target import EmptyWorkspaceTarget
    from dagster._daemon.run_coordinator.queued_run_coordinator_daemon import QueuedRunCoordinatorDaemon

    from ftpipe.preemption import Running, Waiting, plan_preemptions
    from ftpipe.submission import default_manifest, submit_job
    from partitions.run_tags import FINETUNE_JOB, PARTITION_TAG, PREEMPTED_TAG, finetune_tags
    from resources import BaseModelsResource, CatalogResource, LandingZoneResource, PlatformResource
    from sensors.preemption import requeue_preempted_runs
    from sensors.uploads import upload_sensor
    from tests.helpers.origins import finetune_origin

    database = f"ftpipe_day_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_admin, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {database}")
    base = pg_admin.rsplit("/", 1)[0]
    try:
        with tempfile.TemporaryDirectory() as tmp, instance_for_test(overrides={
            # dagster-postgres speaks psycopg2; a bare postgresql:// would get SQLAlchemy's psycopg 3.
            "storage": {"postgres": {"postgres_url": f"{base.replace('postgresql://', 'postgresql+psycopg2://')}/"
                                                     f"{database}"}},
            "run_coordinator": coordinator_config(),
            "run_launcher": {"module": "dagster._core.test_utils", "class": "MockedRunLauncher"},
        }) as instance, create_test_daemon_workspace_context(EmptyWorkspaceTarget(), instance) as workspace:
            folder = Path(tmp)
            landing = LandingZoneResource(url=str(folder / "landing"))
            store = landing.store()
            resources = {"landing": landing, "platform": PlatformResource(tenants_file=str(platform_file(folder))),
                         "base_models": BaseModelsResource(cache_dir=os.environ["FTPIPE_MODEL_CACHE"]),
                         "catalog": CatalogResource(location=f"{base}/{database}?schema=ftpipe")}
            data = {"train.jsonl": b'{"prompt": "q", "completion": "a"}\n'}
            by_key = {f"{j.tenant}__{j.name}": j for j in jobs}
            by_run: dict[str, Job] = {}
            policy = resources["platform"].config().preemption
            daemon = QueuedRunCoordinatorDaemon(interval_seconds=1)
            daemon._logger.setLevel(logging.WARNING)  # two lines a step otherwise
            origin = finetune_origin()
            pending, running = list(jobs), []
            busy = Counter()          # pool -> GPU-seconds busy within the day
            cursor, now = None, 0.0
            tick_seconds, dequeue_seconds, queue_lengths = [], [], []
            limits = coordinator_config()["config"]["tag_concurrency_limits"]
            blocked = defaultdict(Counter)  # tier -> the limit a queued run waited on -> simulated seconds
            while now <= max_hours * HOUR:
                while pending and pending[0].arrives <= now:
                    job = pending.pop(0)
                    submit_job(store, job.tenant, job.name, data, default_manifest("train.jsonl", min_examples=1))
                started = time.perf_counter()
                result = upload_sensor(build_sensor_context(instance=instance, resources=resources, cursor=cursor))
                tick_seconds.append(time.perf_counter() - started)
                cursor = result.cursor
                for request in result.dynamic_partitions_requests:
                    instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
                for request in result.run_requests:
                    job = by_key[request.partition_key]
                    # The GPU stage, as the stage sensor queues it once the CPU stage (not simulated: it holds
                    # no GPU slot) has prepared the job.
                    tags = {**finetune_tags(request.tags, job.kind.pool, job.duration, "simulated"),
                            PARTITION_TAG: request.partition_key}
                    run = create_run_for_test(instance, job_name=FINETUNE_JOB, status=DagsterRunStatus.QUEUED,
                                              remote_job_origin=origin, tags=tags)
                    job.queued, job.run_id, job.tags, job.left = now, run.run_id, tags, job.duration
                    by_run[run.run_id] = job
                for job in [j for j in running if j.ends <= now]:
                    instance.report_dagster_event(DagsterEvent(event_type_value=DagsterEventType.RUN_SUCCESS.value,
                                                               job_name=FINETUNE_JOB), run_id=job.run_id)
                    running.remove(job)
                # Preemption: the platform's policy on the simulated clock, then its requeue sensor. A stopped
                # run checkpoints at its next step (seconds), so it ends at once and resumes with what it had left.
                for plan in plan_preemptions(
                        [Waiting(j.run_id, j.kind.pool, j.tier, j.requeued[-1] if j.requeued else j.queued)
                         for j in queued_jobs(jobs)],
                        [Running(j.run_id, j.kind.pool, j.tier, j.intervals[-1][0], j.duration) for j in running],
                        {pool: slots for pool, (_, slots) in CLUSTER.items()}, now, policy.wait_seconds,
                        policy.max_progress_share, set(policy.preempting_tiers), set(policy.preemptible_tiers)):
                    victim = by_run[plan.victim]
                    instance.add_run_tags(victim.run_id, {PREEMPTED_TAG: plan.for_run})
                    cancel = DagsterEvent(event_type_value=DagsterEventType.RUN_CANCELED.value, job_name=FINETUNE_JOB)
                    instance.report_dagster_event(cancel, run_id=victim.run_id)
                    request = requeue_preempted_runs(build_run_status_sensor_context(
                        sensor_name=requeue_preempted_runs.name, dagster_instance=instance,
                        dagster_run=instance.get_run_by_id(victim.run_id), dagster_event=cancel))
                    again = create_run_for_test(instance, job_name=FINETUNE_JOB, status=DagsterRunStatus.QUEUED,
                                                remote_job_origin=origin,
                                                tags={**request.tags, PARTITION_TAG: request.partition_key})
                    running.remove(victim)
                    victim.left = victim.ends - now
                    victim.intervals[-1] = (victim.intervals[-1][0], now)
                    victim.run_id, victim.tags, victim.ends = again.run_id, dict(again.tags), None
                    victim.requeued.append(now)
                    by_run[again.run_id] = victim
                launched_before = len(instance.run_launcher.queue())
                queue_lengths.append(len(queued_jobs(jobs)))
                started = time.perf_counter()
                list(daemon.run_iteration(workspace))
                dequeue_seconds.append(time.perf_counter() - started)
                for run in instance.run_launcher.queue()[launched_before:]:
                    job = by_run[run.run_id]
                    if job.launched is None:
                        job.launched = now
                    else:
                        job.requeue_waits.append(now - job.requeued[-1])
                    job.ends = now + job.left
                    job.intervals.append((now, job.ends))
                    running.append(job)
                for job in queued_jobs(jobs):
                    blocked[job.tier][blocking_limit(job.tags, [j.tags for j in running], limits)] += step
                for job in running:  # GPU-seconds this step, counted within the day only
                    lo, hi = max(now, job.intervals[-1][0]), min(now + step, job.ends, DAY)
                    busy[job.kind.pool] += max(0.0, hi - lo) * job.kind.gpus
                now += step
                if now >= DAY and not pending and all(j.ends is not None or (j.queued is None and now - j.arrives
                                                                            > REFUSED_AFTER) for j in jobs):
                    break
            return {"busy": busy, "end": now, "blocked": blocked, "tick_seconds": tick_seconds,
                    "dequeue_seconds": dequeue_seconds, "queue_lengths": queue_lengths}
    finally:
        with psycopg.connect(pg_admin, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


def report(jobs: list[Job], sim: dict, wall: float, args) -> dict:
    capacity = {pool: gpus * slots for pool, (gpus, slots) in CLUSTER.items()}
    total_gpus = sum(capacity.values())
    waits = defaultdict(list)
    for job in jobs:
        if job.launched is not None:
            waits[job.tier].append(job.launched - job.queued)
    waiting_at_day_end = Counter(j.tier for j in jobs if j.queued is not None and (j.launched or 1e18) > DAY)
    demand = Counter()
    for job in jobs:
        demand[job.kind.pool] += job.duration * job.kind.gpus
    gpu_hours = sum(demand.values()) / HOUR
    ideal_makespan = max(DAY, sum(demand.values()) / total_gpus)  # the day's work cannot end before it arrives
    refused = sum(j.queued is None for j in jobs)
    out = {"jobs": len(jobs), "refused_by_the_sensor": refused, "tenant_limit": TENANT_LIMIT, "step_s": args.step,
           "wall_s": round(wall, 1), "gpu_hours": round(gpu_hours, 1),
           "tiers": {}, "pools": {}, "drained_h": round(sim["end"] / HOUR, 2)}
    print(f"\n{len(jobs)} jobs, {gpu_hours:,.0f} GPU-hours of work on {total_gpus} GPUs; simulated in steps of "
          f"{args.step:g} s; {wall:.0f} s wall on {os.cpu_count()} CPUs; {refused} refused by the sensor\n")
    print("| tier | jobs | queue wait p50 | p95 | max | SLA | met | still queued at 24:00 | never launched |")
    print("|---|---|---|---|---|---|---|---|---|")
    for tier in TIERS:
        w = waits[tier]
        sla = SLA.get(tier)
        met = f"{sum(x <= sla for x in w) / len(w):.0%}" if sla and w else "-"
        row = {"jobs": sum(j.tier == tier for j in jobs), "p50_min": percentile(w, 0.5) / 60,
               "p95_min": percentile(w, 0.95) / 60, "max_min": max(w, default=0) / 60, "sla_met": met,
               "queued_at_day_end": waiting_at_day_end[tier],
               "never_launched": sum(j.tier == tier and j.queued is not None and j.launched is None for j in jobs)}
        out["tiers"][tier] = row
        print(f"| {tier} | {row['jobs']} | {_dur(percentile(w, 0.5))} | {_dur(percentile(w, 0.95))} | "
              f"{_dur(max(w, default=0))} | {_dur(sla) if sla else '-'} | {met} | {row['queued_at_day_end']} | "
              f"{row['never_launched']} |")
    print("\n| pool | GPUs (slots x size) | work arrived (GPU-h) | busy within the day | of capacity |")
    print("|---|---|---|---|---|")
    for pool, (gpus, slots) in CLUSTER.items():
        used = sim["busy"][pool] / HOUR
        out["pools"][pool] = {"gpus": capacity[pool], "demand_gpu_h": demand[pool] / HOUR, "busy_gpu_h": used,
                              "utilisation": used / (capacity[pool] * 24)}
        print(f"| {pool} | {capacity[pool]} ({slots} x {gpus}) | {demand[pool] / HOUR:,.0f} | {used:,.0f} GPU-h | "
              f"{used / (capacity[pool] * 24):.0%} |")
    reasons = sorted({r for per_tier in sim["blocked"].values() for r in per_tier},
                     key=lambda r: -sum(t[r] for t in sim["blocked"].values()))
    print("\n| queued hours by the limit that held them | " + " | ".join(TIERS) + " |")
    print("|---|" + "---|" * len(TIERS))
    for reason in reasons:
        print(f"| {reason} | " + " | ".join(f"{sim['blocked'][t][reason] / HOUR:,.0f}" for t in TIERS) + " |")
    out["blocked_hours"] = {t: {r: v / HOUR for r, v in sim["blocked"][t].items()} for t in TIERS}
    stopped = [j for j in jobs if j.requeued]
    rewaits = [w for j in jobs for w in j.requeue_waits]
    out["preemptions"] = {"runs_stopped": sum(len(j.requeued) for j in jobs), "jobs": len(stopped),
                          "by_tier": dict(Counter(j.tier for j in stopped)),
                          "requeue_wait_p50_min": percentile(rewaits, 0.5) / 60,
                          "requeue_wait_max_min": max(rewaits, default=float("nan")) / 60}
    print(f"\npreemptions: {out['preemptions']['runs_stopped']} runs stopped ({len(stopped)} jobs, "
          f"{dict(Counter(j.tier for j in stopped)) or 'none'}) for premium runs that had waited past the policy's "
          f"wait; each resumed from its checkpoint after waiting again p50 {_dur(percentile(rewaits, 0.5))}, "
          f"max {_dur(max(rewaits, default=float('nan')))}")
    achieved = sum(sim["busy"].values()) / HOUR / (total_gpus * 24)
    ideal = min(1.0, gpu_hours / (total_gpus * 24))
    out.update(utilisation=achieved, ideal_utilisation=ideal, ideal_makespan_h=ideal_makespan / HOUR)
    print(f"\nGPU utilisation within the day: {achieved:.0%}; an ideal scheduler's bound: {ideal:.0%} "
          f"(all {gpu_hours:,.0f} GPU-hours done by {ideal_makespan / HOUR:.1f} h; this queue drained at "
          f"{sim['end'] / HOUR:.1f} h)")
    ticks, dequeues = sim["tick_seconds"], sim["dequeue_seconds"]
    out.update(sensor_tick_ms_p50=1000 * percentile(ticks, 0.5), sensor_tick_ms_max=1000 * max(ticks),
               dequeue_ms_p50=1000 * percentile(dequeues, 0.5), dequeue_ms_max=1000 * max(dequeues),
               max_queue=max(sim["queue_lengths"]))
    print(f"sensor tick: p50 {out['sensor_tick_ms_p50']:.0f} ms, max {out['sensor_tick_ms_max']:.0f} ms; "
          f"dequeue iteration: p50 {out['dequeue_ms_p50']:.0f} ms, max {out['dequeue_ms_max']:.0f} ms "
          f"with up to {out['max_queue']} runs queued")
    return out


def _dur(seconds: float) -> str:
    if seconds != seconds:  # NaN: nothing launched
        return "-"
    return f"{seconds / 60:.0f} min" if seconds < 2 * HOUR else f"{seconds / HOUR:.1f} h"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--step", type=float, default=60.0, help="simulated seconds per step")
    parser.add_argument("--max-hours", type=float, default=48.0, help="stop simulating after this many hours")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--tenant-limit", type=int, help="runs a tenant may have at once (production: 1)")
    args = parser.parse_args()
    global TENANT_LIMIT
    TENANT_LIMIT = args.tenant_limit
    jobs = day_of_jobs(args.jobs, args.seed)
    started = time.perf_counter()
    sim = simulate(jobs, args.postgres, args.step, args.max_hours)
    out = report(jobs, sim, time.perf_counter() - started, args)
    results = REPO_ROOT / "bench" / "results"
    results.mkdir(parents=True, exist_ok=True)
    (results / "day.json").write_text(json.dumps(out, indent=2, default=str))


if __name__ == "__main__":
    main()
