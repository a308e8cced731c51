"""Preemption in Dagster: stop a free-tier run for a premium run that has waited too long, then queue the
stopped run again so that it resumes from the checkpoint its trainer wrote when asked to stop.

Stopping is Dagster's own termination (what the UI's Terminate does): the run worker is interrupted, the
Pipes client sends SIGTERM to the trainer, which checkpoints at its next step and exits, and the run ends
CANCELED. Its usage is metered as preempted, at the platform's cost.
"""

import time

from dagster import (
    DagsterRunStatus,
    DefaultSensorStatus,
    RunsFilter,
    RunStatusSensorContext,
    SensorEvaluationContext,
    SkipReason,
    run_status_sensor,
    sensor,
)

from ft_assets.jobs import finetune_job
from ftpipe.preemption import Running, Waiting, plan_preemptions
from partitions.run_tags import EXPECTED_SECONDS_TAG, POOL_TAG, PREEMPTED_TAG, TIER_TAG
from resources import PlatformResource
from sensors.attempts import next_attempt

_IN_PROGRESS = [DagsterRunStatus.STARTING, DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING]


# Every 10 s: two run-table queries per tick, and a premium run should not wait on the sensor's own cadence.
@sensor(minimum_interval_seconds=10, default_status=DefaultSensorStatus.RUNNING)
def preempt_for_premium(context: SensorEvaluationContext, platform: PlatformResource):
    config = platform.config()
    policy = config.preemption
    if not policy.enabled:
        return SkipReason("preemption is disabled in tenants.yaml")
    instance = context.instance
    waiting = [Waiting(r.dagster_run.run_id, r.dagster_run.tags.get(POOL_TAG, ""), r.dagster_run.tags.get(TIER_TAG, ""),
                       r.create_timestamp.timestamp())
               for r in instance.get_run_records(RunsFilter(statuses=[DagsterRunStatus.QUEUED],
                                                            job_name=finetune_job.name))]
    if not waiting:
        return SkipReason("no run is waiting")
    running = []
    for record in instance.get_run_records(RunsFilter(statuses=_IN_PROGRESS, job_name=finetune_job.name)):
        run = record.dagster_run
        expected = run.tags.get(EXPECTED_SECONDS_TAG)
        running.append(Running(run.run_id, run.tags.get(POOL_TAG, ""), run.tags.get(TIER_TAG, ""),
                               record.start_time or record.create_timestamp.timestamp(),
                               float(expected) if expected else None,
                               stopping=run.status == DagsterRunStatus.CANCELING or PREEMPTED_TAG in run.tags))
    plans = plan_preemptions(waiting, running, {name: pool.slots for name, pool in config.pools.items()},
                             time.time(), policy.wait_seconds, policy.max_progress_share,
                             set(policy.preempting_tiers), set(policy.preemptible_tiers))
    for plan in plans:
        instance.add_run_tags(plan.victim, {PREEMPTED_TAG: plan.for_run})
        stopped = instance.run_coordinator.cancel_run(plan.victim)
        context.log.info(f"preempting {plan.victim} ({'stopping' if stopped else 'could not stop'}): {plan.reason}")
    if not plans:
        return SkipReason(f"{len(waiting)} run(s) waiting; none may preempt")
    return None


@run_status_sensor(run_status=DagsterRunStatus.CANCELED, monitored_jobs=[finetune_job], request_job=finetune_job,
                   minimum_interval_seconds=10, default_status=DefaultSensorStatus.RUNNING)
def requeue_preempted_runs(context: RunStatusSensorContext):
    """A preempted run goes back into the queue, one attempt later; its training resumes from the checkpoint
    (the training folder is keyed by the job's resolved spec). A run an operator canceled stays canceled."""
    run = context.dagster_run
    if PREEMPTED_TAG not in run.tags:
        return SkipReason(f"run {run.run_id} was canceled, not preempted")
    return next_attempt(run, run_key=f"{run.run_id}:requeue", drop=(PREEMPTED_TAG,))
