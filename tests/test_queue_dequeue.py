"""The QueuedRunCoordinator's real dequeue, with the project's limits, over many runs across tenants, tiers
and pools: at every step no pool holds more runs than it has slots, no tenant more than its concurrency
quota, the free tier no more than its share, and no queued run is passed over by a lower-priority one
unless a limit blocks it."""

import random
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from dagster import DagsterEvent, DagsterEventType, DagsterRunStatus, instance_for_test
from dagster._core.test_utils import create_run_for_test, create_test_daemon_workspace_context
from dagster._core.workspace.load_target import EmptyWorkspaceTarget
from dagster._daemon.run_coordinator.queued_run_coordinator_daemon import QueuedRunCoordinatorDaemon

from ftpipe.tenants import load_platform_config
from partitions.run_tags import (
    KIND_TAG,
    MAINTENANCE,
    POOL_TAG,
    PREPARE_JOB,
    PRIORITY_TAG,
    STAGE_TAG,
    TENANT_JOB,
    TENANT_TAG,
    TIER_TAG,
)
from tests.helpers.origins import finetune_origin

REPO = Path(__file__).resolve().parents[1]
IN_PROGRESS = {DagsterRunStatus.STARTING, DagsterRunStatus.STARTED}


def _coordinator_config(dagster_yaml: Path) -> dict:
    return yaml.safe_load(dagster_yaml.read_text())["run_coordinator"]["config"]


def _limits(config: dict) -> dict[tuple[str, str], int]:
    """(tag key, value) -> limit; value "*" for a limit applied per unique value."""
    return {(lim["key"], "*" if isinstance(lim["value"], dict) else lim["value"]): lim["limit"]
            for lim in config["tag_concurrency_limits"]}


@pytest.mark.parametrize("dagster_yaml", ["dagster.yaml", "docs/deploy/dagster.postgres.yaml"])
def test_every_pools_queue_limit_is_its_slots(dagster_yaml):
    limits = _limits(_coordinator_config(REPO / dagster_yaml))
    platform = load_platform_config(REPO / "tenants.yaml")
    assert {value: limit for (key, value), limit in limits.items() if key == POOL_TAG} == {
        name: pool.slots for name, pool in platform.pools.items()}


@contextmanager
def _queue(config: dict):
    """An instance with Dagster's QueuedRunCoordinator on ``config`` and a launcher that starts nothing, and the
    workspace its dequeue daemon runs in."""
    with instance_for_test(overrides={
        "run_coordinator": {"module": "dagster._core.run_coordinator", "class": "QueuedRunCoordinator",
                            "config": config},
        "run_launcher": {"module": "dagster._core.test_utils", "class": "MockedRunLauncher"},
    }) as instance, create_test_daemon_workspace_context(EmptyWorkspaceTarget(), instance) as workspace:
        yield instance, workspace


def _blocked(run, running, limits, max_concurrent) -> bool:
    tags = run.tags
    if len(running) >= max_concurrent:
        return True
    if sum(r.tags[TENANT_TAG] == tags[TENANT_TAG] for r in running) >= limits[(TENANT_TAG, "*")]:
        return True
    for key in (POOL_TAG, STAGE_TAG, TIER_TAG):
        limit = limits.get((key, tags.get(key)))
        if limit is not None and sum(r.tags.get(key) == tags[key] for r in running) >= limit:
            return True
    return False


def test_many_queued_runs_dequeue_within_every_limit_in_priority_order():
    config = _coordinator_config(REPO / "docs/deploy/dagster.postgres.yaml")  # production's cap, so pools bind
    limits = _limits(config)
    platform = load_platform_config(REPO / "tenants.yaml")
    tiers = {"premium": platform.tiers["premium"].priority, "standard": platform.tiers["standard"].priority,
             "free": platform.tiers["free"].priority}
    rng = random.Random(7)
    with _queue(config) as (instance, workspace):
        origin = finetune_origin()
        runs = []
        for n in range(180):
            tenant = f"t{n % 60:02d}"
            tier = ("premium", "standard", "free")[int(tenant[1:]) % 3]
            pool = rng.choices(["h100x1", "h100x4", "h100x8"], weights=[8, 2, 1])[0]
            # A third are first stages: CPU work under the prepare limit, holding no pool's slot.
            stage = {STAGE_TAG: "prepare"} if rng.random() < 1 / 3 else {STAGE_TAG: "finetune", POOL_TAG: pool}
            runs.append(create_run_for_test(instance, job_name=stage[STAGE_TAG], status=DagsterRunStatus.QUEUED,
                                            remote_job_origin=origin, tags={
                TENANT_TAG: tenant, TIER_TAG: tier, PRIORITY_TAG: str(tiers[tier]), KIND_TAG: TENANT_JOB, **stage}))
        daemon = QueuedRunCoordinatorDaemon(interval_seconds=1)
        launched_order, iterations, peak, passed_over = [], 0, Counter(), 0
        while len(launched_order) < len(runs):
            iterations += 1
            assert iterations < 200, "the queue stopped draining"
            queued_before = [r for r in instance.get_runs() if r.status == DagsterRunStatus.QUEUED]
            list(daemon.run_iteration(workspace))
            current = {r.run_id: r for r in instance.get_runs()}
            running = [r for r in current.values() if r.status in IN_PROGRESS]
            new = [r for r in queued_before if current[r.run_id].status in IN_PROGRESS]
            launched_order += [r.run_id for r in new]
            # Limits hold at every step.
            assert len(running) <= config["max_concurrent_runs"]
            in_use = Counter(r.tags.get(POOL_TAG) or r.tags[STAGE_TAG] for r in running)
            peak.update({name: n - peak[name] for name, n in in_use.items() if n > peak[name]})
            for (key, value), limit in limits.items():
                counts = Counter(r.tags[key] for r in running if key in r.tags)
                assert max(counts.values(), default=0) <= limit if value == "*" else counts[value] <= limit
            # Priority: a run still waiting was blocked by a limit, or ranks below everything launched now.
            waiting = [r for r in queued_before if current[r.run_id].status == DagsterRunStatus.QUEUED]
            lowest_launched = min((int(r.tags[PRIORITY_TAG]) for r in new), default=None)
            for run in waiting:
                if lowest_launched is not None and int(run.tags[PRIORITY_TAG]) > lowest_launched:
                    assert _blocked(run, running, limits, config["max_concurrent_runs"]), run.tags
                    passed_over += 1
            # Half of the running runs finish before the next tick.
            for run in rng.sample(running, k=max(1, len(running) // 2)) if running else []:
                instance.report_dagster_event(DagsterEvent(event_type_value=DagsterEventType.RUN_SUCCESS.value,
                                                           job_name=run.job_name), run_id=run.run_id)
        assert sorted(launched_order) == sorted(r.run_id for r in runs)
        # The limits really bound: the multi-GPU pools filled, and higher-priority runs waited behind them.
        assert peak["h100x4"] == 2 and peak["h100x8"] == 1 and peak["prepare"] == limits[(STAGE_TAG, PREPARE_JOB)]
        assert passed_over > 0
        # Premium work goes first overall: the mean launch position rises as the tier's priority falls.
        position = {run_id: i for i, run_id in enumerate(launched_order)}
        mean = {tier: sum(position[r.run_id] for r in runs if r.tags[TIER_TAG] == tier)
                / sum(r.tags[TIER_TAG] == tier for r in runs) for tier in tiers}
        assert mean["premium"] < mean["standard"] < mean["free"]


@pytest.mark.parametrize("dagster_yaml", ["dagster.yaml", "docs/deploy/dagster.postgres.yaml"])
def test_the_run_cap_fits_the_tenant_jobs_share_and_leaves_room_for_maintenance(dagster_yaml):
    config = _coordinator_config(REPO / dagster_yaml)
    tenant_share = _limits(config)[(KIND_TAG, TENANT_JOB)]
    assert config["max_concurrent_runs"] - tenant_share >= 2
    if "postgres" in dagster_yaml:  # production: every pool's limit and the prepare stage's can be reached at once
        platform = load_platform_config(REPO / "tenants.yaml")
        assert tenant_share == sum(pool.slots for pool in platform.pools.values()) + _limits(config)[
            (STAGE_TAG, PREPARE_JOB)]


def test_a_maintenance_run_does_not_wait_behind_tenants_jobs():
    """Tenants' jobs fill their share of the run cap with more queued; the serving refresh queued after them
    is launched on the next dequeue, with the repo's own coordinator config."""
    config = _coordinator_config(REPO / "dagster.yaml")
    share = _limits(config)[(KIND_TAG, TENANT_JOB)]
    with _queue(config) as (instance, workspace):
        origin = finetune_origin()
        for n in range(share + 3):
            create_run_for_test(instance, job_name="finetune", status=DagsterRunStatus.QUEUED, remote_job_origin=origin,
                                tags={TENANT_TAG: f"t{n}", TIER_TAG: "premium", POOL_TAG: "cpu-local",
                                      PRIORITY_TAG: "10", KIND_TAG: TENANT_JOB})
        daemon = QueuedRunCoordinatorDaemon(interval_seconds=1)
        list(daemon.run_iteration(workspace))
        assert sum(r.status in IN_PROGRESS for r in instance.get_runs()) == share
        refresh = create_run_for_test(instance, job_name="refresh_serving_config", status=DagsterRunStatus.QUEUED,
                                      remote_job_origin=origin, tags={KIND_TAG: MAINTENANCE, PRIORITY_TAG: "100"})
        list(daemon.run_iteration(workspace))
        assert instance.get_run_by_id(refresh.run_id).status in IN_PROGRESS
        assert sum(r.status == DagsterRunStatus.QUEUED for r in instance.get_runs()) == 3
