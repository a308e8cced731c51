"""Run tags the platform sets: who a run is for, where it runs, and how urgently."""

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


def run_tags(platform: PlatformConfig, tenant: str, job: str, attempt: int = 1) -> dict[str, str]:
    tenant_cfg = platform.tenant(tenant)
    return {
        TENANT_TAG: tenant,
        JOB_TAG: job,
        TIER_TAG: tenant_cfg.tier,
        POOL_TAG: platform.default_pool,
        PRIORITY_TAG: str(platform.tiers[tenant_cfg.tier].priority),
        ATTEMPT_TAG: str(attempt),
    }
