"""The job manifest a tenant uploads, parsed and validated at the edge.

Errors name the file and the field. The tenant's tier, pool and quotas are deliberately *not* fields here:
they come from the platform's tenant configuration, so a manifest cannot raise its own priority.
"""

from __future__ import annotations

from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from ftpipe.evaluation.gates import GateError, parse_gates
from ftpipe.training.spec import OVERRIDABLE

MANIFEST_NAME = "manifest.yaml"


class ManifestError(ValueError):
    pass


class JobManifest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    base_model: str
    dataset: str = Field(description="File name of the training data inside the job folder.")
    eval_dataset: str | None = Field(default=None, description="Optional evaluation file inside the job folder.")
    # Adapter methods only for now: a full fine-tune trains (ftpipe.training.methods) but the registry and the
    # vLLM handoff take adapters (issue #6).
    method: Literal["lora", "qlora", "dora", "rslora"] = "lora"
    objective: Literal["sft", "dpo"] = "sft"
    """``dpo`` needs preference pairs (prompt/chosen/rejected, or input/preferred_output/non_preferred_output)."""
    holdout_fraction: float = Field(default=0.1, gt=0.0, lt=0.5)
    min_examples: int = Field(default=100, ge=1)
    hyperparameters: dict[str, bool | int | float | str] = Field(default_factory=dict)
    quality_gates: dict[str, str] = Field(
        default_factory=dict, description="e.g. {holdout_exact_match: '>= 0.6'}; see ftpipe.evaluation.gates")

    @field_validator("dataset", "eval_dataset")
    @classmethod
    def _plain_file_name(cls, value: str | None) -> str | None:
        if value is not None and (not value or "/" in value or "\\" in value or value.startswith(".")):
            raise ValueError("must be a plain file name inside the job folder (no '/', no leading '.')")
        return value

    @field_validator("hyperparameters")
    @classmethod
    def _known_hyperparameters(cls, value: dict) -> dict:
        unknown = sorted(set(value) - set(OVERRIDABLE))
        if unknown:
            raise ValueError(f"unknown hyperparameter(s) {unknown}; allowed: {sorted(OVERRIDABLE)}")
        converted = {}
        for name, raw in value.items():
            try:
                converted[name] = OVERRIDABLE[name](raw)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"'{name}': {exc}") from None
        return converted


    @field_validator("quality_gates")
    @classmethod
    def _gates_name_known_metrics(cls, value: dict, info: ValidationInfo) -> dict:
        try:
            parse_gates(value, source="manifest", objective=info.data.get("objective", "sft"))
        except GateError as exc:
            raise ValueError(str(exc)) from None
        return value


def parse_manifest(text: str | bytes, source: str = MANIFEST_NAME) -> JobManifest:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ManifestError(f"{source}{where}: not valid YAML: {getattr(exc, 'problem', exc)}") from exc
    if not isinstance(data, dict):
        raise ManifestError(f"{source}: expected a mapping of fields, got {type(data).__name__}")
    try:
        return JobManifest.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"field '{'.'.join(str(p) for p in err['loc']) or '(root)'}': {err['msg']}" for err in exc.errors()
        )
        raise ManifestError(f"{source}: {problems}") from exc
