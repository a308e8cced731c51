"""Monthly GPU-hour quotas: a hard quota refuses work, a soft one lets it through and bills the overage."""

from __future__ import annotations

from dataclasses import dataclass

from ftpipe.tenants import PlatformConfig


@dataclass(frozen=True)
class QuotaDecision:
    allowed: bool
    over_soft_quota: bool = False
    message: str | None = None


def decide(tier_name: str, quota_gpu_hours: float | None, kind: str, used_gpu_hours: float, month: str,
           estimated_gpu_hours: float = 0.0) -> QuotaDecision:
    """Whether a job may use the GPUs, given what the tenant's billable attempts used this month.

    The upload sensor knows no estimate yet (it reads only the manifest), so there a hard quota refuses
    once it is used up; the pre-flight knows the job's estimate and refuses a job that would cross it.
    """
    if quota_gpu_hours is None:
        return QuotaDecision(True)
    after = used_gpu_hours + estimated_gpu_hours
    exceeded = after > quota_gpu_hours if estimated_gpu_hours else used_gpu_hours >= quota_gpu_hours
    if not exceeded:
        return QuotaDecision(True)
    used = f"{used_gpu_hours:.3g} GPU-hours used in {month}"
    if estimated_gpu_hours:
        used += f" + {estimated_gpu_hours:.3g} estimated for this job"
    if kind == "hard":
        return QuotaDecision(False, message=(
            f"the {tier_name} tier's quota is {quota_gpu_hours:g} GPU-hours per month and it is a hard limit: "
            f"{used}. The job can be submitted again next month, or after an upgrade of the tier."))
    return QuotaDecision(True, over_soft_quota=True, message=(
        f"over the {tier_name} tier's soft quota of {quota_gpu_hours:g} GPU-hours per month ({used}); "
        "the hours beyond it are billed as overage"))


def decide_for_tenant(config: PlatformConfig, tenant: str, used_gpu_hours: float, month: str,
                      estimated_gpu_hours: float = 0.0) -> QuotaDecision:
    """``decide`` with the quota of the tenant's tier."""
    tier_name = config.tenant(tenant).tier
    tier = config.tiers[tier_name]
    return decide(tier_name, tier.gpu_hours_per_month, tier.quota, used_gpu_hours, month, estimated_gpu_hours)
