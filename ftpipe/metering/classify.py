"""Who pays for an attempt's GPU time: the tenant when the attempt did the tenant's work or failed on the
tenant's input; the platform (a refund) when the platform stopped it or broke under it."""

from __future__ import annotations

from dataclasses import dataclass

COMPLETED = "completed"
USER_ERROR = "user_error"          # bad data, divergence, OOM from the tenant's own overrides
PLATFORM_ERROR = "platform_error"  # OOM from a platform-chosen setting, a crashed trainer
PREEMPTED = "preempted"            # stopped by the platform (preemption, an operator's cancel)
LOST = "lost"                      # the run worker or node died; nobody heard the trainer end
INTERRUPTED = "interrupted"        # the trainer's outcome when it stopped on a signal

CHARGED = frozenset({COMPLETED, USER_ERROR})


@dataclass(frozen=True)
class Classification:
    category: str
    billable: bool


def classify(outcome: str, error_class: str | None = None) -> Classification:
    """``outcome`` as the trainer reported it (completed / failed / interrupted), or ``lost`` when it never did.

    ``error_class`` (user / platform) says whose fault a failure was; ``ftpipe.training.failures`` decides it
    where the failure happens, e.g. an OOM is the tenant's only when the tenant's overrides caused it.
    """
    if outcome == "completed":
        category = COMPLETED
    elif outcome == "failed":
        category = USER_ERROR if error_class == "user" else PLATFORM_ERROR
    elif outcome == INTERRUPTED:
        category = PREEMPTED
    elif outcome == LOST:
        category = LOST
    else:
        raise ValueError(f"unknown trainer outcome {outcome!r}")
    return Classification(category, category in CHARGED)
