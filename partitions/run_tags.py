"""Run tags the platform sets: who a run is for, where it runs, and how urgently.

Here, below the resources, the assets and the sensors, so that each of them reads the same names and none
imports another layer for them (``tests/test_layering.py``)."""

from __future__ import annotations

import math
from collections.abc import Mapping

from ftpipe.tenants import PlatformConfig

TENANT_TAG = "ftpipe/tenant"
JOB_TAG = "ftpipe/job"
TIER_TAG = "ftpipe/tier"
POOL_TAG = "ftpipe/pool"                          # the GPU pool whose slot the run holds: finetune runs only
ROUTED_POOL_TAG = "ftpipe/routed-pool"            # the pool admission chose, carried by the prepare run
STAGE_TAG = "ftpipe/stage"                        # prepare (CPU) or finetune (a GPU slot): each has its limit
ATTEMPT_TAG = "ftpipe/attempt"
MANIFEST_VERSION_TAG = "ftpipe/manifest-version"
PRIORITY_TAG = "dagster/priority"
OVER_QUOTA_TAG = "ftpipe/over-quota"
EXPECTED_SECONDS_TAG = "ftpipe/expected-seconds"  # the pre-flight's estimate, read by preemption
PREEMPTED_TAG = "ftpipe/preempted-for"            # the run that a preempted run made room for
KIND_TAG = "ftpipe/kind"                          # tenant-job or maintenance: each has its share of the run cap
TENANT_JOB, MAINTENANCE = "tenant-job", "maintenance"
OUTCOME_TAG = "ftpipe/outcome"                    # why the run ended, in one line, for the Runs list
REFUSED_LAUNCH_TAG = "ftpipe/refused-launch"      # a launch the run coordinator refused: an operator's, not a job
ERROR_CLASS_TAG = "ftpipe/error-class"            # whose fault a failure was: "user" or "platform"
CANCEL_REQUESTED_TAG = "ftpipe/cancel-requested"  # on a finished prepare run: do not queue its finetune run
PREPARED_BY_TAG = "ftpipe/prepared-by"            # on a finetune run: the prepare run whose outputs it trains on
PARTITION_TAG = "dagster/partition"

# A tenant's partition runs as two jobs, so that a GPU slot is held only while the GPUs work: ``prepare``
# (raw -> validated -> tokenized, the pre-flight) under a CPU limit, then ``finetune`` (adapter -> eval ->
# registered) under its pool's limit, queued by ``sensors.stages`` once prepare has succeeded.
PREPARE_JOB = "prepare"
FINETUNE_JOB = "finetune"
TENANT_JOBS = (PREPARE_JOB, FINETUNE_JOB)


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


def run_tags(platform: PlatformConfig, tenant: str, job: str, pool: str, attempt: int = 1,
             stage: str = PREPARE_JOB) -> dict[str, str]:
    """Every tag a first attempt of ``stage`` gets, for a job admission routed to ``pool``: a prepare run
    carries the pool for the finetune run to hold; a finetune run holds it."""
    tags = partition_tags(platform, tenant, job)
    return {
        **tags,
        KIND_TAG: TENANT_JOB,
        STAGE_TAG: stage,
        (ROUTED_POOL_TAG if stage == PREPARE_JOB else POOL_TAG): pool,
        PRIORITY_TAG: str(platform.tiers[tags[TIER_TAG]].priority),
        ATTEMPT_TAG: str(attempt),
    }


def finetune_tags(prepare_tags: Mapping[str, str], pool: str, expected_seconds: float,
                  prepare_run_id: str) -> dict[str, str]:
    """The finetune run's tags, from the prepare run's: the same tenant, tier, priority and manifest version,
    the slot of ``pool``, its first attempt, and how long the pre-flight expects it to hold the slot (what
    preemption reads)."""
    carried = {k: v for k, v in prepare_tags.items()
               if (k.startswith("ftpipe/") or k == PRIORITY_TAG)
               and k not in (ROUTED_POOL_TAG, ATTEMPT_TAG, OUTCOME_TAG, ERROR_CLASS_TAG, CANCEL_REQUESTED_TAG,
                             EXPECTED_SECONDS_TAG)}
    tags = {**carried, STAGE_TAG: FINETUNE_JOB, POOL_TAG: pool, ATTEMPT_TAG: "1", PREPARED_BY_TAG: prepare_run_id}
    if math.isfinite(expected_seconds):  # no estimate, no tag: preemption takes the run as just started
        tags[EXPECTED_SECONDS_TAG] = f"{max(expected_seconds, 1):.0f}"
    return tags
