"""Training failures that carry who caused them and what to change, in words a tenant can act on."""

from __future__ import annotations

from pathlib import Path

USER = "user"
PLATFORM = "platform"


class TrainingFailure(Exception):
    error_class = PLATFORM

    def __init__(self, message: str, advice: list[str]) -> None:
        super().__init__(message)
        self.message = message
        self.advice = advice

    def report(self) -> str:
        return "\n".join([self.message, *(f"- {line}" for line in self.advice)])


class TrainingDiverged(TrainingFailure):
    """Loss or gradients became NaN/inf. Retrying the same settings would diverge again, so it never is."""

    error_class = USER

    @classmethod
    def at(cls, step: int, detail: str, learning_rate: float, overrides: list[str]) -> "TrainingDiverged":
        advice = [f"lower learning_rate from {learning_rate:g} to {learning_rate / 10:g}"
                  + (" (you set it in the manifest)" if "learning_rate" in overrides else "")]
        advice.append("look for examples that are very long, repeat one token, or hold encoded binary data; "
                      "the validation report lists length outliers and near-duplicates")
        if "lora_alpha" in overrides or "lora_r" in overrides:
            advice.append("a large lora_alpha / lora_r ratio scales updates up; try lora_alpha = lora_r")
        return cls(f"training diverged at step {step} ({detail}); no checkpoint after it was kept", advice)


class OutOfMemory(TrainingFailure):
    """Out of GPU memory even after the automatic retry with half the micro-batch."""

    def __init__(self, message: str, advice: list[str], caused_by_tenant: bool) -> None:
        super().__init__(message, advice)
        self.error_class = USER if caused_by_tenant else PLATFORM


class TimeLimitExceeded(TrainingFailure):
    """The job ran past its time limit (a multiple of the pre-flight's estimate): stopped at a checkpoint."""

    error_class = USER

    @classmethod
    def at(cls, step: int, max_steps: int, limit_seconds: float, checkpoint: str | None) -> "TimeLimitExceeded":
        kept = f"; its checkpoint {Path(checkpoint).name} is kept" if checkpoint else ""
        return cls(f"training ran past its time limit of {limit_seconds / 60:,.1f} minutes (several times the "
                   f"pre-flight's estimate) and was stopped at step {step} of {max_steps}{kept}",
                   ["the estimate is in validation.md; lower epochs or max_steps, or split the data into smaller "
                    "jobs, and submit again",
                    "if the estimate itself looks wrong for your data, tell the platform's operators"])
