"""A run's next attempt, as the failure and preemption sensors request it."""

from __future__ import annotations

from dagster import DagsterRun, RunRequest

from partitions.run_tags import ATTEMPT_TAG, ERROR_CLASS_TAG, OUTCOME_TAG, PARTITION_TAG, PRIORITY_TAG


def next_attempt(run: DagsterRun, run_key: str, drop: tuple[str, ...] = ()) -> RunRequest:
    """``run``'s job and partition again, one attempt later, with its platform tags (pool, tier, priority, ...) less
    ``drop``: the training step finds the checkpoints of the attempts before it and resumes."""
    drop = (*drop, OUTCOME_TAG, ERROR_CLASS_TAG)  # the new attempt's outcome is its own
    tags = {k: v for k, v in run.tags.items() if (k.startswith("ftpipe/") or k == PRIORITY_TAG) and k not in drop}
    return RunRequest(run_key=run_key, job_name=run.job_name, partition_key=run.tags.get(PARTITION_TAG),
                      tags={**tags, ATTEMPT_TAG: str(int(run.tags.get(ATTEMPT_TAG, "1")) + 1)})
