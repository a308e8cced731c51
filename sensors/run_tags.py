"""Run tags the platform sets: who a run is for, where it runs, and how urgently."""

from __future__ import annotations

from dagster import DagsterRun, RunRequest

from ftpipe.tenants import PlatformConfig

TENANT_TAG = "ftpipe/tenant"
JOB_TAG = "ftpipe/job"
TIER_TAG = "ftpipe/tier"
POOL_TAG = "ftpipe/pool"
ATTEMPT_TAG = "ftpipe/attempt"
MANIFEST_VERSION_TAG = "ftpipe/manifest-version"
PRIORITY_TAG = "dagster/priority"
OVER_QUOTA_TAG = "ftpipe/over-quota"
EXPECTED_SECONDS_TAG = "ftpipe/expected-seconds"  # set by the pre-flight, read by preemption
PREEMPTED_TAG = "ftpipe/preempted-for"            # the run that a preempted run made room for
PARTITION_TAG = "dagster/partition"
FINETUNE_JOB = "finetune"                          # the one job that runs a tenant's partition


def partition_tags(platform: PlatformConfig, tenant: str, job: str) -> dict[str, str]:
    """What a run's partition alone decides: whose job it is, and the tenant's tier."""
    return {TENANT_TAG: tenant, JOB_TAG: job, TIER_TAG: platform.tenant(tenant).tier}


def run_tags(platform: PlatformConfig, tenant: str, job: str, attempt: int = 1) -> dict[str, str]:
    """Every tag a first attempt gets; a sensor replaces the pool with its routing and counts the attempts."""
    tags = partition_tags(platform, tenant, job)
    return {
        **tags,
        POOL_TAG: platform.default_pool,
        PRIORITY_TAG: str(platform.tiers[tags[TIER_TAG]].priority),
        ATTEMPT_TAG: str(attempt),
    }


def next_attempt(run: DagsterRun, run_key: str, drop: tuple[str, ...] = ()) -> RunRequest:
    """``run``'s partition again, one attempt later, with its platform tags (pool, tier, priority, ...) less
    ``drop``: the training step finds the checkpoints of the attempts before it and resumes."""
    tags = {k: v for k, v in run.tags.items() if (k.startswith("ftpipe/") or k == PRIORITY_TAG) and k not in drop}
    return RunRequest(run_key=run_key, partition_key=run.tags.get(PARTITION_TAG),
                      tags={**tags, ATTEMPT_TAG: str(int(run.tags.get(ATTEMPT_TAG, "1")) + 1)})
