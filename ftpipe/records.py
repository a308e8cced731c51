"""The values a tenant job's assets pass to each other: typed, versioned, stored as JSON.

Each record holds what the record before it held and what its own asset added, so the asset that reads
``TrainedAdapter`` finds every field in these classes, not by reading every asset upstream of it. The values
are stored as JSON (``resources.io_manager``) under a name and a version: a value written by another version
of these classes is refused with the asset to materialize again, never misread, and nothing is unpickled.

The payloads written by other processes (the trainer's ``training.json``, the evaluation's report) stay dicts
here; their own modules read them (``ftpipe.training.runner``, ``ftpipe.evaluation``).
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from ftpipe.basemodel.registry import ResolvedBaseModel
from ftpipe.data.pipeline import ExamplesCheck
from ftpipe.manifest import JobManifest
from ftpipe.training.spec import TrainJobSpec


class StaleRecord(Exception):
    """A stored value that these classes cannot read: another record, another version, or not a record."""


class AssetRecord(BaseModel):
    # Infinity and NaN survive the round trip (an estimate or a score may be either); JSON proper has neither.
    model_config = ConfigDict(extra="forbid", frozen=True, ser_json_inf_nan="constants")
    version: ClassVar[int] = 1
    """Raised whenever a field's meaning or type changes: the stored values of the old one are then refused."""

    def to_json(self) -> str:
        name = json.dumps(type(self).__name__)
        return f'{{"record": {name}, "version": {self.version}, "value": {self.model_dump_json()}}}'

    @staticmethod
    def from_json(text: str, source: str) -> AssetRecord:
        try:
            stored = json.loads(text)
            kind, version, value = stored["record"], stored["version"], stored["value"]
        except (ValueError, TypeError, KeyError) as exc:
            raise StaleRecord(f"{source} holds no asset record ({exc})") from None
        record_type = RECORD_TYPES.get(kind)
        if record_type is None or version != record_type.version:
            raise StaleRecord(f"{source} holds a {kind} record of version {version}, which this version of the "
                              "platform does not read; materialize the asset again for this partition")
        return record_type.model_validate(value)


class RawDataset(AssetRecord):
    """raw_dataset: the job's manifest and its data files, copied into a content-addressed snapshot."""
    tenant: str
    job: str
    manifest: JobManifest
    dataset_digest: str
    """Of the snapshot's files: names the validated file and keys the tokenized cache."""
    files: dict[str, str]
    """Role (``train``, ``eval``) -> the snapshot file's path."""


class ValidatedDataset(RawDataset):
    """validated_dataset: the examples normalized to chat messages and split, with what the checks found."""
    examples_file: str
    """Parquet of the normalized examples, a ``split`` column telling train from holdout."""
    check: ExamplesCheck


class TokenizedDataset(ValidatedDataset):
    """tokenized_dataset: the tokenized train split (the held-out one beside it) and the training it plans."""
    tokenized_file: str
    base_model: ResolvedBaseModel
    spec: dict[str, Any]
    """``TrainJobSpec.to_dict()`` of the plan: hashed as written to name the training folder (``train_spec``)."""
    pool: str
    expected_seconds: float
    """How long the GPU run should hold its slot, the pool's calibration applied (may be infinite)."""
    data_warnings: dict[str, int]
    """Warning kind -> count, of validation and pre-flight: the advice on a failed gate reads them."""

    def train_spec(self) -> TrainJobSpec:
        return TrainJobSpec.from_dict(self.spec)


class TrainedAdapter(TokenizedDataset):
    """adapter: the trained adapter's folder, the spec it was trained under and the trainer's record."""
    adapter_dir: str
    spec_hash: str
    """Of the spec and the base model's weights: names the training folder the checkpoints live in."""
    training: dict[str, Any]
    """The trainer's ``training.json`` (``ftpipe.training.runner.TRAINING_RESULT``)."""


class EvaluatedAdapter(TrainedAdapter):
    """eval_report: the evaluation's report (``eval_report.json``), base model against the tuned one."""
    eval: dict[str, Any]


class RegisteredAdapter(AssetRecord):
    """registered_adapter: the adapter's row in the registry and where its served files are."""
    adapter_id: str
    path: str
    status: str
    serving_problems: list[str]


RECORD_TYPES: dict[str, type[AssetRecord]] = {t.__name__: t for t in (
    RawDataset, ValidatedDataset, TokenizedDataset, TrainedAdapter, EvaluatedAdapter, RegisteredAdapter)}
