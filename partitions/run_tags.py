"""Run tags the platform sets: who a run is for, where it runs, and how urgently.

Here, below the resources, the assets and the sensors, so that each of them reads the same names and none
imports another layer for them (``tests/test_layering.py``)."""

from __future__ import annotations

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
KIND_TAG = "ftpipe/kind"                          # tenant-job or maintenance: each has its share of the run cap
TENANT_JOB, MAINTENANCE = "tenant-job", "maintenance"
OUTCOME_TAG = "ftpipe/outcome"                    # why the run ended, in one line, for the Runs list
REFUSED_LAUNCH_TAG = "ftpipe/refused-launch"      # a launch the run coordinator refused: an operator's, not a job
ERROR_CLASS_TAG = "ftpipe/error-class"            # whose fault a failure was: "user" or "platform"
PARTITION_TAG = "dagster/partition"
FINETUNE_JOB = "finetune"                          # the one job that runs a tenant's partition


MAX_OUTCOME_CHARS = 160


def outcome_tag_value(reason: str, error_class: str | None = None) -> str:
    """``[user] <the reason's first line>`` for a failure, the bare line for a success; short enough for the
    Runs list. The whole reason is in the run's logs and the tenant's report."""
    line = (reason.strip().splitlines() or ["failed"])[0]
    if len(line) > MAX_OUTCOME_CHARS:
        line = line[:MAX_OUTCOME_CHARS - 1].rstrip() + "…"
    return f"[{error_class}] {line}" if error_class else line


def partition_tags(platform: PlatformConfig, tenant: str, job: str) -> dict[str, str]:
    """What a run's partition alone decides: whose job it is, and the tenant's tier."""
    return {TENANT_TAG: tenant, JOB_TAG: job, TIER_TAG: platform.tenant(tenant).tier}


def run_tags(platform: PlatformConfig, tenant: str, job: str, attempt: int = 1) -> dict[str, str]:
    """Every tag a first attempt gets; a sensor replaces the pool with its routing and counts the attempts."""
    tags = partition_tags(platform, tenant, job)
    return {
        **tags,
        KIND_TAG: TENANT_JOB,
        POOL_TAG: platform.default_pool,
        PRIORITY_TAG: str(platform.tiers[tags[TIER_TAG]].priority),
        ATTEMPT_TAG: str(attempt),
    }
