"""Which run to stop so that a long-waiting premium run gets a slot: the policy, apart from Dagster.

When a run of a preempting tier (premium) has waited longer than ``wait_seconds`` for a pool whose slots
are all held, and some of those slots are held by runs of a preemptible tier (free), the youngest such run
that has done less than ``max_progress_share`` of its expected duration is asked to stop. Stopping is the
trainer's SIGTERM handshake: it checkpoints at the next step and exits, so the work lost is at most one
step; the run is then queued again and resumes from that checkpoint. Younger runs are chosen because they
have the least done; runs past the share are left alone, because they will soon free the slot anyway.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Waiting:
    run_id: str
    pool: str
    tier: str
    queued_at: float


@dataclass(frozen=True)
class Running:
    run_id: str
    pool: str
    tier: str
    started_at: float
    expected_seconds: float | None  # None before the pre-flight has estimated it
    stopping: bool = False          # already asked to stop


@dataclass(frozen=True)
class Preemption:
    victim: str
    for_run: str
    pool: str
    reason: str


def plan_preemptions(waiting: list[Waiting], running: list[Running], slots: dict[str, int], now: float,
                     wait_seconds: float, max_progress_share: float, preempting_tiers: set[str],
                     preemptible_tiers: set[str]) -> list[Preemption]:
    """At most one victim per long-waiting run, in queue order; never a run already stopping.

    Slots that are free or being freed (their runs are stopping) go to the preempting runs first in the
    queue, so only a run left without one may stop another.
    """
    chosen: list[Preemption] = []
    taken: set[str] = set()
    available = {pool: n - sum(r.pool == pool and not r.stopping for r in running) for pool, n in slots.items()}
    for run in sorted(waiting, key=lambda w: w.queued_at):
        if run.tier not in preempting_tiers:
            continue
        if available.get(run.pool, 0) > 0:
            available[run.pool] -= 1  # the queue gives it a slot that is free or being freed
            continue
        waited = now - run.queued_at
        if waited < wait_seconds:
            continue
        candidates = []
        for r in running:
            if r.pool != run.pool or r.tier not in preemptible_tiers or r.stopping or r.run_id in taken:
                continue
            share = (now - r.started_at) / r.expected_seconds if r.expected_seconds else 0.0
            if share < max_progress_share:
                candidates.append((r.started_at, share, r))
        if not candidates:
            continue
        _, share, victim = max(candidates, key=lambda c: c[0])  # the youngest
        taken.add(victim.run_id)
        chosen.append(Preemption(victim.run_id, run.run_id, run.pool,
                                 f"{run.tier} run {run.run_id} waited {waited:.0f}s for pool {run.pool}; "
                                 f"{victim.tier} run {victim.run_id} was {share:.0%} through its expected time"))
    return chosen
