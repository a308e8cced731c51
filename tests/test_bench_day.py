"""bench/day.py's simulated day on a few jobs: the real sensor admits every upload, and the real coordinator's
dequeue on PostgreSQL never lets a pool, a tenant or the free tier run more than its limit at once."""

import pytest

from tests.helpers.postgres import ADMIN_URL, require_postgres

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("tiny_model")]


def _overlapping(jobs) -> int:
    """The most of ``jobs``' runs holding a slot at one instant (a run ending as another launches does not
    overlap it); a preempted job's runs are its intervals."""
    events = sorted([(start, 1) for j in jobs for start, _ in j.intervals]
                    + [(end, -1) for j in jobs for _, end in j.intervals])
    most = now = 0
    for _, change in events:
        now += change
        most = max(most, now)
    return most


def test_a_small_day_runs_every_job_within_every_limit():
    require_postgres()
    from bench import day

    jobs = day.day_of_jobs(40, seed=3)
    sim = day.simulate(jobs, ADMIN_URL, step=600, max_hours=40)
    assert all(j.queued is not None and j.queued >= j.arrives for j in jobs)  # the sensor admitted every upload
    launched = [j for j in jobs if j.launched is not None]
    assert len(launched) >= 30 and all(j.launched >= j.queued for j in launched)
    for pool, (_, slots) in day.CLUSTER.items():
        assert _overlapping([j for j in launched if j.kind.pool == pool]) <= slots
    for tenant in {j.tenant for j in launched}:
        assert _overlapping([j for j in launched if j.tenant == tenant]) <= 1
    assert _overlapping([j for j in launched if j.tier == "free"]) <= 1
    # The limits bound: some run waited.
    assert max(j.launched - j.queued for j in launched) > 0
    assert sum(sim["busy"].values()) > 0
    # A preempted job resumed where it stopped: its runs add up to its duration, one after the other.
    for job in (j for j in launched if j.requeued and j.ends is not None):
        assert job.tier == "free"
        assert sum(end - start for start, end in job.intervals) == pytest.approx(job.duration)
        assert all(a[1] <= b[0] for a, b in zip(job.intervals, job.intervals[1:]))
