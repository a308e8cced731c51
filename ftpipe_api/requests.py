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

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

Auto = Literal["auto"]
Scalar = str | int | float | bool
"""A manifest hyperparameter's value: each is converted and range-checked by its own rule."""
_SURROGATE = re.compile("[\ud800-\udfff]")


def _strings(value) -> list[str]:
    """Every string in a decoded JSON document, keys included; a loop, not recursion (JSON may nest deep)."""
    found, stack = [], [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return found


class _Strict(BaseModel):
    # strict: JSON's true is not the number 1, "0.1" is not a number, "yes" is not a flag.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)

    @model_validator(mode="before")
    @classmethod
    def _no_surrogates(cls, data):
        # JSON's "\ud800" escapes decode to text no catalog or report can store as UTF-8 (nor can the error
        # quote it: the field is named only when its name is itself clean).
        for key, value in data.items() if isinstance(data, dict) else [("(body)", data)]:
            if any(_SURROGATE.search(s) for s in _strings([key, value])):
                where = f"'{key}'" if isinstance(key, str) and not _SURROGATE.search(key) else "a key"
                raise ValueError(f"{where} holds an unpaired UTF-16 surrogate (an escape such as \"\\ud800\"); "
                                 "send the text itself")
        return data


class Hyperparameters(_Strict):
    n_epochs: Auto | Annotated[float, Field(ge=0.001, le=100)] = "auto"
    batch_size: Auto | Annotated[int, Field(ge=1, le=1024)] = "auto"
    learning_rate_multiplier: Auto | Annotated[float, Field(ge=0.0001, le=100)] = "auto"
    beta: Auto | Annotated[float, Field(ge=0.0001, le=10)] = "auto"


class MethodDetails(_Strict):
    hyperparameters: Hyperparameters | None = None


class Method(_Strict):
    type: Literal["supervised", "dpo"]
    supervised: MethodDetails | None = None
    dpo: MethodDetails | None = None

    def hyperparameters(self) -> Hyperparameters | None:
        details = self.supervised if self.type == "supervised" else self.dpo
        return details.hyperparameters if details else None


Short = Annotated[str, StringConstraints(max_length=200)]


class PlatformOptions(_Strict):
    adapter: Literal["lora", "qlora", "dora", "rslora"] = "lora"
    hyperparameters: dict[Short, Scalar] = Field(default_factory=dict, max_length=32)
    quality_gates: dict[Short, Short] = Field(default_factory=dict, max_length=20)
    columns: dict[Short, Short] = Field(default_factory=dict, max_length=32)
    roles: dict[Short, Short] = Field(default_factory=dict, max_length=32)
    holdout_fraction: float | None = None
    min_examples: int | None = Field(default=None, ge=1, le=10**9)
    new_run: bool = False
    """Train even when an identical job (same data, settings and base model) has already succeeded."""


class CreateJob(_Strict):
    model: str = Field(min_length=1, max_length=200)
    training_file: str = Field(min_length=1, max_length=100)
    validation_file: str | None = Field(default=None, min_length=1, max_length=100)
    method: Method | None = None
    hyperparameters: Hyperparameters | None = None
    """OpenAI's older place for them; ``method`` wins where both are given."""
    suffix: str | None = Field(default=None, max_length=64, pattern=r"^[A-Za-z0-9_.-]*$")
    metadata: dict[Annotated[str, StringConstraints(max_length=64)],
                   Annotated[str, StringConstraints(max_length=512)]] | None = Field(default=None, max_length=16)
    """As OpenAI limits it: 16 pairs, keys of up to 64 characters, values of up to 512."""
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
