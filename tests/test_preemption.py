"""Preemption: the policy on its own, and the sensors that stop a free-tier run for a long-waiting premium
run and queue it again to resume."""

import pytest
from dagster import (
    DagsterEventType,
    DagsterRunStatus,
    RunRequest,
    SkipReason,
    build_run_status_sensor_context,
    build_sensor_context,
    instance_for_test,
)
from dagster._core.test_utils import create_run_for_test

from ftpipe.preemption import Running, Waiting, plan_preemptions
from resources import PlatformResource
from sensors.preemption import preempt_for_premium, requeue_preempted_runs
from tests.helpers.origins import finetune_origin
from tests.helpers.stoppable_launcher import StoppableRunLauncher

NOW = 10_000.0


def _plan(waiting, running, slots=None, wait_seconds=600, share=0.5):
    return plan_preemptions(waiting, running, slots or {"h100x1": 2}, NOW, wait_seconds, share, {"premium"},
                            {"free"})


def test_the_youngest_free_run_under_the_share_is_stopped_for_a_premium_run_that_waited():
    premium = Waiting("p1", "h100x1", "premium", queued_at=NOW - 700)
    running = [Running("f-old", "h100x1", "free", started_at=NOW - 1000, expected_seconds=4000),
               Running("f-young", "h100x1", "free", started_at=NOW - 100, expected_seconds=4000)]
    (plan,) = _plan([premium], running)
    assert (plan.victim, plan.for_run) == ("f-young", "p1")
    assert "premium run p1 waited 700s for pool h100x1; free run f-young was 2% through" in plan.reason


@pytest.mark.parametrize("case, waiting, running", [
    ("waited too little", [Waiting("p1", "h100x1", "premium", NOW - 100)],
     [Running("f1", "h100x1", "free", NOW - 10, 4000), Running("f2", "h100x1", "free", NOW - 10, 4000)]),
    ("a slot is free", [Waiting("p1", "h100x1", "premium", NOW - 700)],
     [Running("f1", "h100x1", "free", NOW - 10, 4000)]),
    ("the free runs are far along", [Waiting("p1", "h100x1", "premium", NOW - 700)],
     [Running("f1", "h100x1", "free", NOW - 3000, 4000), Running("f2", "h100x1", "free", NOW - 2500, 4000)]),
    ("only paid runs hold the pool", [Waiting("p1", "h100x1", "premium", NOW - 700)],
     [Running("s1", "h100x1", "standard", NOW - 10, 4000), Running("s2", "h100x1", "premium", NOW - 10, 4000)]),
    ("the waiting run is not premium", [Waiting("s1", "h100x1", "standard", NOW - 7000)],
     [Running("f1", "h100x1", "free", NOW - 10, 4000), Running("f2", "h100x1", "free", NOW - 10, 4000)]),
    ("another pool is full", [Waiting("p1", "h100x4", "premium", NOW - 700)],
     [Running("f1", "h100x1", "free", NOW - 10, 4000), Running("f2", "h100x1", "free", NOW - 10, 4000)]),
    ("a run is already stopping", [Waiting("p1", "h100x1", "premium", NOW - 700)],
     [Running("f1", "h100x1", "free", NOW - 10, 4000, stopping=True), Running("f2", "h100x1", "free", NOW - 10, 4000)]),
])
def test_nothing_is_stopped_when(case, waiting, running):
    assert _plan(waiting, running, slots={"h100x1": 2, "h100x4": 2}) == [], case


def test_two_waiting_runs_stop_two_different_runs_and_a_run_not_yet_estimated_counts_as_just_started():
    # f1 has no estimate yet (before its pre-flight): it counts as just started, and is the youngest.
    waiting = [Waiting("p1", "h100x1", "premium", NOW - 900), Waiting("p2", "h100x1", "premium", NOW - 800)]
    running = [Running("f1", "h100x1", "free", NOW - 50, None), Running("f2", "h100x1", "free", NOW - 60, 4000)]
    assert [(p.for_run, p.victim) for p in _plan(waiting, running)] == [("p1", "f1"), ("p2", "f2")]
    # A slot being freed already goes to the first waiting run: only the second one stops another.
    running[0] = Running("f1", "h100x1", "free", NOW - 50, None, stopping=True)
    assert [(p.for_run, p.victim) for p in _plan(waiting, running)] == [("p2", "f2")]


def test_the_sensors_stop_the_free_run_and_queue_it_again_one_attempt_later(tmp_path):
    platform_file = tmp_path / "tenants.yaml"
    platform_file.write_text(
        "default_pool: h100x1\n"
        "pools:\n  h100x1: {gpu: H100, gpu_memory_gb: 80, slots: 1, peak_tflops: 989}\n"
        "preemption: {wait_seconds: 0, max_progress_share: 0.5}\n"
        "tiers:\n  premium: {priority: 10}\n  free: {priority: 0}\n"
        "tenants:\n  acme: {tier: premium}\n  initech: {tier: free}\n")
    platform = PlatformResource(tenants_file=str(platform_file))
    tags = {"ftpipe/pool": "h100x1", "dagster/priority": "0", "ftpipe/tenant": "initech", "ftpipe/tier": "free",
            "ftpipe/job": "helpdesk", "ftpipe/attempt": "1", "ftpipe/expected-seconds": "3600",
            "dagster/partition": "initech__helpdesk"}
    StoppableRunLauncher.terminated.clear()
    with instance_for_test(overrides={"run_launcher": {"module": "tests.helpers.stoppable_launcher",
                                                       "class": "StoppableRunLauncher"}}) as instance:
        free = create_run_for_test(instance, job_name="finetune", status=DagsterRunStatus.STARTED, tags=tags)
        premium = create_run_for_test(instance, job_name="finetune", status=DagsterRunStatus.QUEUED,
                                      remote_job_origin=finetune_origin(), tags={
            **tags, "ftpipe/tenant": "acme", "ftpipe/tier": "premium", "dagster/priority": "10"})
        preempt_for_premium(build_sensor_context(instance=instance, resources={"platform": platform}))
        assert StoppableRunLauncher.terminated == [free.run_id]
        stopped = instance.get_run_by_id(free.run_id)
        assert stopped.status == DagsterRunStatus.CANCELED
        assert stopped.tags["ftpipe/preempted-for"] == premium.run_id
        # A second tick stops nothing more: the slot is free now and the queue gives it to the premium run.
        again = preempt_for_premium(build_sensor_context(instance=instance, resources={"platform": platform}))
        assert isinstance(again, SkipReason)
        assert StoppableRunLauncher.terminated == [free.run_id]

        request = requeue_preempted_runs(build_run_status_sensor_context(
            sensor_name=requeue_preempted_runs.name, dagster_instance=instance, dagster_run=stopped,
            dagster_event=instance.all_logs(stopped.run_id, of_type=DagsterEventType.RUN_CANCELED)[0].dagster_event))
        # A run an operator canceled stays canceled.
        canceled = create_run_for_test(instance, job_name="finetune", status=DagsterRunStatus.CANCELED, tags=tags)
        kept = requeue_preempted_runs(build_run_status_sensor_context(
            sensor_name=requeue_preempted_runs.name, dagster_instance=instance, dagster_run=canceled,
            dagster_event=instance.all_logs(stopped.run_id, of_type=DagsterEventType.RUN_CANCELED)[0].dagster_event))
        assert isinstance(kept, SkipReason)
    assert isinstance(request, RunRequest)
    assert request.partition_key == "initech__helpdesk"
    assert request.tags["ftpipe/attempt"] == "2" and request.tags["dagster/priority"] == "0"
    assert "ftpipe/preempted-for" not in request.tags
    # The GPU stage again: its data is not prepared again, so the pre-flight's estimate goes with it.
    assert request.job_name == "finetune" and request.tags["ftpipe/expected-seconds"] == "3600"
