"""The records passed between assets: JSON that reads back as the same typed value, and refused when stale."""

import json
import math
import pickle

import pytest
from dagster import build_input_context, build_output_context

from ftpipe.basemodel.registry import ResolvedBaseModel
from ftpipe.data.pipeline import ExamplesCheck
from ftpipe.data.quality import DataWarning
from ftpipe.data.schema import RowError, ValidationOutcome
from ftpipe.manifest import JobManifest
from ftpipe.records import (
    RECORD_TYPES,
    AssetRecord,
    EvaluatedAdapter,
    RawDataset,
    RegisteredAdapter,
    StaleRecord,
    TokenizedDataset,
)
from resources.io_manager import TenantIOManager

BASE = ResolvedBaseModel("ftpipe/tiny-llama", "/models/tiny", "d" * 64, "t" * 64, "c" * 64, 1234)
MANIFEST = JobManifest(base_model="ftpipe/tiny-llama", dataset="train.jsonl", hyperparameters={"epochs": 2},
                       quality_gates={"holdout_exact_match": ">= 0.5"}, columns={"messages": "dialogue"})
CHECK = ExamplesCheck(ValidationOutcome(10, [RowError("train.jsonl", 3, "messages[0].role", "unknown role")],
                                        n_row_errors=1),
                      [DataWarning("pii", "emails", 2, ["train.jsonl line 4"], ["a***@example.com"])],
                      {"train": 9, "holdout": 1, "mean_turns": 2.5})


def _evaluated() -> EvaluatedAdapter:
    raw = RawDataset(tenant="acme", job="j1", manifest=MANIFEST, dataset_digest="a" * 64,
                     files={"train": "/snap/train.jsonl"})
    tokenized = TokenizedDataset(**dict(raw), examples_file="/v.parquet", check=CHECK, tokenized_file="/t.parquet",
                                 base_model=BASE, spec={"method": "lora", "objective": "sft", "lr": 2e-4},
                                 pool="h100x1", expected_seconds=math.inf, data_warnings={"pii": 2})
    return EvaluatedAdapter(**dict(tokenized), adapter_dir="/a", spec_hash="h" * 64,
                            training={"steps": 3, "final_loss": 1.5, "eval_history": [[1, 2.0]]},
                            eval={"rows": [], "perplexity": math.nan})


def test_a_record_reads_back_as_the_same_typed_value():
    record = _evaluated()
    back = AssetRecord.from_json(record.to_json(), source="test")
    assert type(back) is EvaluatedAdapter
    assert back.manifest == MANIFEST and back.base_model == BASE and back.check == CHECK
    assert back.expected_seconds == math.inf and math.isnan(back.eval["perplexity"])  # non-finite survive
    assert back.model_dump(exclude={"eval"}) == record.model_dump(exclude={"eval"})


def test_a_record_names_its_type_and_version():
    stored = json.loads(RegisteredAdapter(adapter_id="x", path="/p", status="draft", serving_problems=[]).to_json())
    assert stored == {"record": "RegisteredAdapter", "version": 1,
                      "value": {"adapter_id": "x", "path": "/p", "status": "draft", "serving_problems": []}}
    assert set(RECORD_TYPES) == {"RawDataset", "ValidatedDataset", "TokenizedDataset", "TrainedAdapter",
                                 "EvaluatedAdapter", "RegisteredAdapter"}


@pytest.mark.parametrize("text, says", [
    ('{"record": "EvaluatedAdapter", "version": 0, "value": {}}', "version 0"),
    ('{"record": "Pickle", "version": 1, "value": {}}', "Pickle record"),
    ('{"value": {}}', "holds no asset record"),
    ("not json", "holds no asset record"),
    ("[1, 2]", "holds no asset record"),
])
def test_a_value_of_another_version_or_shape_is_refused_by_name(text, says):
    with pytest.raises(StaleRecord, match=says):
        AssetRecord.from_json(text, source="stored.json")


def test_a_field_these_classes_do_not_know_is_refused():
    stored = json.loads(_evaluated().to_json())
    stored["value"]["unknown"] = 1
    with pytest.raises(ValueError, match="unknown"):
        AssetRecord.from_json(json.dumps(stored), source="stored.json")


def _contexts(tmp_path):
    manager = TenantIOManager(root=str(tmp_path))
    out = build_output_context(asset_key="eval_report", partition_key="acme__j1")
    into = build_input_context(asset_key="eval_report", partition_key="acme__j1", upstream_output=out)
    return manager, out, into


def test_the_io_manager_stores_json_in_the_tenants_job_folder(tmp_path):
    manager, out, into = _contexts(tmp_path)
    manager.handle_output(out, _evaluated())
    (stored,) = tmp_path.rglob("eval_report.json")
    assert "acme" in stored.parts and stored.parent.name == "dagster-io"
    assert json.loads(stored.read_text(), parse_constant=float)["record"] == "EvaluatedAdapter"
    loaded = manager.load_input(into)
    assert isinstance(loaded, EvaluatedAdapter) and loaded.model_dump(exclude={"eval"}) == _evaluated().model_dump(
        exclude={"eval"})


def test_the_io_manager_stores_nothing_but_records(tmp_path):
    manager, out, _ = _contexts(tmp_path)
    with pytest.raises(TypeError, match="not an ftpipe.records.AssetRecord"):
        manager.handle_output(out, {"tenant": "acme"})
    assert not list(tmp_path.rglob("*.json"))


def test_a_pickle_left_by_an_earlier_version_is_refused_unread(tmp_path):
    manager, out, into = _contexts(tmp_path)
    manager.handle_output(out, _evaluated())
    (stored,) = tmp_path.rglob("eval_report.json")
    stored.with_suffix(".pickle").write_bytes(pickle.dumps({"tenant": "acme"}))
    stored.unlink()
    with pytest.raises(StaleRecord, match="earlier version of the platform.*materialize the asset again"):
        manager.load_input(into)
