"""The job manifest a tenant uploads, parsed and validated at the edge.

Errors name the file and the field. The tenant's tier, pool and quotas are deliberately *not* fields here:
they come from the platform's tenant configuration, so a manifest cannot raise its own priority.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from ftpipe.data.columns import MESSAGE_FIELDS, RECORD_FIELDS, check_columns, check_roles
from ftpipe.evaluation.gates import GateError, parse_gates
from ftpipe.training.spec import OVERRIDABLE

MANIFEST_NAME = "manifest.yaml"
MAX_MANIFEST_BYTES = 64 * 1024
"""A manifest is a dozen short fields; anything larger is refused before it is parsed."""
MAX_YAML_DEPTH = 8
"""The deepest a valid manifest nests is 2 (hyperparameters.epochs); deep YAML is refused while it is read."""
MAX_YAML_NODES = 500
"""A valid manifest has a few dozen values. PyYAML reads about 20,000 nodes a second, so a 64 KiB flat list would
cost a tick nearly two seconds; reading stops at the first node past this."""
BASE_MODEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}(/[A-Za-z0-9][A-Za-z0-9._-]{0,95})?")
"""A model id as the hub writes them (``org/name``): never a path, so a tenant cannot point at the host's files."""
_SURROGATE = re.compile("[\ud800-\udfff]")
_FILE_NAME = re.compile(r"[^./\\\x00-\x1f\x7f][^/\\\x00-\x1f\x7f]{0,127}")


class ManifestError(ValueError):
    pass


def check_data_file_name(value: str) -> str:
    """A name a data file may have inside a job folder, or ValueError saying what one may be. Format characters
    (right-to-left overrides, zero-width joiners) are refused: 'a\u202egnp.jsonl' shows as 'ajsonl.png'."""
    if (not _FILE_NAME.fullmatch(value) or value == MANIFEST_NAME or len(value.encode("utf-8")) > 255
            or any(unicodedata.category(c) == "Cf" for c in value)):
        raise ValueError(f"{value[:100]!r} is not a data file name inside the job folder (1-128 characters and "
                         "at most 255 bytes, no '/', '\\', control or format characters, no leading '.', not "
                         "the manifest itself)")
    return value


class JobManifest(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    base_model: str = Field(description="A base-model id the platform registered (tenants.yaml: base_models)")
    dataset: str = Field(description="File name of the training data inside the job folder.")
    eval_dataset: str | None = Field(default=None, description="Optional evaluation file inside the job folder.")
    # Adapter methods only for now: a full fine-tune trains (ftpipe.training.methods) but the registry and the
    # vLLM handoff take adapters (issue #6).
    method: Literal["lora", "qlora", "dora", "rslora"] = "lora"
    objective: Literal["sft", "dpo"] = "sft"
    """``dpo`` needs preference pairs (prompt/chosen/rejected, or input/preferred_output/non_preferred_output)."""
    holdout_fraction: float = Field(default=0.1, gt=0.0, lt=0.5)
    min_examples: int = Field(default=100, ge=1)
    # Any scalar here: each value is converted and range-checked by its own rule (``OVERRIDABLE``), whose message
    # says what the field takes, which pydantic's union errors would not.
    hyperparameters: dict[str, Any] = Field(default_factory=dict, max_length=len(OVERRIDABLE))
    quality_gates: dict[str, str] = Field(
        default_factory=dict, max_length=20,
        description="e.g. {holdout_exact_match: '>= 0.6'}; see ftpipe.evaluation.gates")
    columns: dict[str, str] = Field(
        default_factory=dict, max_length=len(RECORD_FIELDS) + len(MESSAGE_FIELDS),
        description="the platform's field name -> the key in your file, e.g. {messages: dialogue, role: speaker}")
    roles: dict[str, str] = Field(
        default_factory=dict, max_length=32,
        description="a role name in your file -> system, user, assistant or tool, e.g. {bot: assistant}")

    @field_validator("base_model")
    @classmethod
    def _model_id(cls, value: str) -> str:
        if not BASE_MODEL_ID.fullmatch(value) or ".." in value:
            raise ValueError(f"{value[:100]!r} is not a base-model id such as 'ftpipe/tiny-llama' (paths are not "
                             "accepted: the platform registers the base models a job may name)")
        return value

    @field_validator("dataset", "eval_dataset")
    @classmethod
    def _plain_file_name(cls, value: str | None) -> str | None:
        return value if value is None else check_data_file_name(value)

    @field_validator("hyperparameters")
    @classmethod
    def _known_hyperparameters(cls, value: dict) -> dict:
        unknown = sorted(set(value) - set(OVERRIDABLE))
        if unknown:
            raise ValueError(f"unknown hyperparameter(s) {[str(u)[:40] for u in unknown[:5]]}; "
                             f"allowed: {sorted(OVERRIDABLE)}")
        converted = {}
        for name, raw in value.items():
            try:
                converted[name] = OVERRIDABLE[name](raw)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"'{name}': {exc}") from None
        return converted

    @model_validator(mode="after")
    def _eval_is_another_file(self) -> "JobManifest":
        if self.eval_dataset is not None and self.eval_dataset == self.dataset:
            raise ValueError("'eval_dataset' names the training file itself: a score on the data the adapter "
                             "trained on says nothing; give a separate file, or leave it out for a held-out split")
        return self

    @field_validator("columns")
    @classmethod
    def _columns_map_known_fields(cls, value: dict) -> dict:
        check_columns(value)
        return value

    @field_validator("roles")
    @classmethod
    def _roles_map_onto_ours(cls, value: dict) -> dict:
        check_roles(value)
        return value

    @field_validator("quality_gates")
    @classmethod
    def _gates_name_known_metrics(cls, value: dict, info: ValidationInfo) -> dict:
        try:
            parse_gates(value, source="manifest", objective=info.data.get("objective", "sft"))
        except GateError as exc:
            raise ValueError(str(exc)) from None
        return value


class _ManifestLoader(yaml.SafeLoader):
    """PyYAML's safe loader without what a hostile manifest abuses: anchors and aliases (a few kilobytes of
    aliases expand to gigabytes), unbounded nesting (its composer recurses once per level) and node counts that
    make reading slow. The document is composed lazily, so each limit stops the scanner where it is crossed."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            raise yaml.composer.ComposerError(None, None, "anchors and aliases are not allowed in a manifest",
                                              self.peek_event().start_mark)
        self._nodes = getattr(self, "_nodes", 0) + 1
        if self._nodes > MAX_YAML_NODES:
            raise yaml.composer.ComposerError(None, None, f"more than {MAX_YAML_NODES} values",
                                              self.peek_event().start_mark)
        self._depth = getattr(self, "_depth", 0) + 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                raise yaml.composer.ComposerError(None, None, f"nested deeper than {MAX_YAML_DEPTH} levels",
                                                  self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def load_yaml(text: str | bytes, source: str, max_bytes: int = MAX_MANIFEST_BYTES):
    """A small YAML document, or ManifestError: whatever the bytes are, nothing else escapes."""
    if len(text) > max_bytes:
        raise ManifestError(f"{source}: {len(text):,} bytes; a manifest may have at most {max_bytes:,}")
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ManifestError(f"{source}: not UTF-8 text (byte {exc.start + 1})") from None
    try:
        return yaml.load(text, Loader=_ManifestLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ManifestError(f"{source}{where}: not valid YAML: {getattr(exc, 'problem', None) or exc}") from None
    except ValueError as exc:
        # PyYAML hands a 5,000-digit integer to int() and lets its ValueError through.
        why = "a number has far more digits than any field takes" if "digits" in str(exc) else str(exc)[:200]
        raise ManifestError(f"{source}: not a valid manifest: {why}") from None
    except (OverflowError, RecursionError, MemoryError) as exc:
        raise ManifestError(f"{source}: not a valid manifest: {type(exc).__name__}") from None


def _surrogate_in(value) -> bool:
    """Whether a string anywhere in the (small, shallow) document holds half a UTF-16 pair, as a YAML escape
    like "\\ud800" can: no such text can be written as UTF-8, into a report or a file name."""
    if isinstance(value, str):
        return _SURROGATE.search(value) is not None
    if isinstance(value, dict):
        return any(_surrogate_in(k) or _surrogate_in(v) for k, v in value.items())
    return isinstance(value, list) and any(_surrogate_in(v) for v in value)


def parse_manifest(text: str | bytes, source: str = MANIFEST_NAME) -> JobManifest:
    data = load_yaml(text, source)
    if not isinstance(data, dict):
        raise ManifestError(f"{source}: expected a mapping of fields, got {type(data).__name__}")
    if _surrogate_in(data):
        raise ManifestError(f"{source}: a value contains an unpaired UTF-16 surrogate (an escape such as "
                            "\"\\ud800\"); write the text itself")
    try:
        return JobManifest.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"field '{'.'.join(str(p)[:60] for p in err['loc']) or '(root)'}': "
            f"{err['msg'].removeprefix('Value error, ')[:300]}"
            for err in exc.errors()[:10]
        )
        raise ManifestError(f"{source}: {problems}") from None
