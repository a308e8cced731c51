"""The body of ``POST /v1/fine_tuning/jobs`` as OpenAI's SDK sends it, and its translation into a manifest.

OpenAI's fields map onto the manifest as far as the platform's concepts go: ``model`` is a registered base
model, ``method.type`` the objective, the hyperparameters the manifest's (``n_epochs`` -> ``epochs``,
``batch_size`` -> ``micro_batch_size``, ``learning_rate_multiplier`` times the platform's automatic learning
rate, DPO's ``beta`` -> ``dpo_beta``), ``seed`` the training seed. What OpenAI has no field for goes under
``ftpipe`` (``extra_body={"ftpipe": {...}}`` in the SDK): the adapter method, any manifest hyperparameter,
quality gates, column and role mappings, the held-out fraction, and ``new_run`` to train again what already
trained.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Auto = Literal["auto"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class Hyperparameters(_Strict):
    n_epochs: Auto | float = "auto"
    batch_size: Auto | int = "auto"
    learning_rate_multiplier: Auto | float = "auto"
    beta: Auto | float = "auto"


class MethodDetails(_Strict):
    hyperparameters: Hyperparameters | None = None


class Method(_Strict):
    type: Literal["supervised", "dpo"]
    supervised: MethodDetails | None = None
    dpo: MethodDetails | None = None

    def hyperparameters(self) -> Hyperparameters | None:
        details = self.supervised if self.type == "supervised" else self.dpo
        return details.hyperparameters if details else None


class PlatformOptions(_Strict):
    adapter: Literal["lora", "qlora", "dora", "rslora"] = "lora"
    hyperparameters: dict[str, Any] = Field(default_factory=dict)
    quality_gates: dict[str, str] = Field(default_factory=dict)
    columns: dict[str, str] = Field(default_factory=dict)
    roles: dict[str, str] = Field(default_factory=dict)
    holdout_fraction: float | None = None
    min_examples: int | None = None
    new_run: bool = False
    """Train even when an identical job (same data, settings and base model) has already succeeded."""


class CreateJob(_Strict):
    model: str = Field(max_length=200)
    training_file: str = Field(max_length=100)
    validation_file: str | None = Field(default=None, max_length=100)
    method: Method | None = None
    hyperparameters: Hyperparameters | None = None
    """OpenAI's older place for them; ``method`` wins where both are given."""
    suffix: str | None = Field(default=None, max_length=64)
    metadata: dict[str, str] | None = Field(default=None, max_length=16)
    seed: int | None = Field(default=None, ge=0, le=2**31 - 1)
    integrations: list | None = Field(default=None, max_length=0)
    ftpipe: PlatformOptions = Field(default_factory=PlatformOptions)


def manifest_fields(body: CreateJob, file_objective: str, auto_learning_rate: float) -> dict:
    """The manifest's fields, less the data file names, from the request. ``file_objective``: what the
    training file's examples train (its upload's validation found it) when ``method`` does not say."""
    objective = {"supervised": "sft", "dpo": "dpo"}[body.method.type] if body.method else file_objective
    hp = (body.method.hyperparameters() if body.method else None) or body.hyperparameters or Hyperparameters()
    translated: dict[str, Any] = {}
    if hp.n_epochs != "auto":
        translated["epochs"] = hp.n_epochs
    if hp.batch_size != "auto":
        translated["micro_batch_size"] = hp.batch_size
        translated["gradient_accumulation_steps"] = 1
    if hp.learning_rate_multiplier != "auto":
        translated["learning_rate"] = float(f"{hp.learning_rate_multiplier * auto_learning_rate:.6g}")
    if hp.beta != "auto":
        translated["dpo_beta"] = hp.beta
    if body.seed is not None:
        translated["seed"] = body.seed
    both = sorted(set(translated) & set(body.ftpipe.hyperparameters))
    if both:
        raise ValueError(f"ftpipe.hyperparameters sets {both}, which OpenAI's fields already set")
    options = body.ftpipe
    fields: dict[str, Any] = {"base_model": body.model, "method": options.adapter, "objective": objective,
                              "hyperparameters": {**translated, **options.hyperparameters}}
    for name in ("quality_gates", "columns", "roles"):
        if getattr(options, name):
            fields[name] = getattr(options, name)
    for name in ("holdout_fraction", "min_examples"):
        if getattr(options, name) is not None:
            fields[name] = getattr(options, name)
    return fields
