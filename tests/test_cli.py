import pytest

from ftpipe.landing import job_file_key, manifest_key
from ftpipe.objectstore import LocalObjectStore
from ftpipe_cli.main import main


@pytest.fixture
def landing_store(tmp_path, monkeypatch) -> LocalObjectStore:
    """The local landing zone the CLI is pointed at (through its environment), as an object store to read back."""
    monkeypatch.setenv("FTPIPE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("FTPIPE_LANDING_URL", str(tmp_path / "landing"))
    return LocalObjectStore(tmp_path / "landing")


def test_submit_uploads_data_then_a_default_manifest(landing_store, tmp_path, capsys):
    data = tmp_path / "train.jsonl"
    data.write_text('{"prompt": "q", "completion": "a"}\n')
    assert main(["submit", "--tenant", "acme", "--job", "support-v1", "--data", str(data)]) == 0
    assert landing_store.read_bytes(job_file_key("acme", "support-v1", "train.jsonl")) == data.read_bytes()
    assert b"dataset: train.jsonl" in landing_store.read_bytes(manifest_key("acme", "support-v1"))
    assert "submitted acme/support-v1" in capsys.readouterr().out
    # A second submission of the same job never overwrites the first.
    assert main(["submit", "--tenant", "acme", "--job", "support-v1", "--data", str(data)]) == 2
    assert "already exists" in capsys.readouterr().err


def test_submit_refuses_bad_names_and_bad_manifests_before_uploading(landing_store, tmp_path, capsys):
    data = tmp_path / "train.jsonl"
    data.write_text("{}\n")
    assert main(["submit", "--tenant", "../acme", "--job", "j", "--data", str(data)]) == 2
    assert "invalid tenant name" in capsys.readouterr().err
    manifest = tmp_path / "manifest.yaml"
    manifest.write_text("base_model: m\ndataset: other.jsonl\n")
    assert main(["submit", "--tenant", "acme", "--job", "j", "--data", str(data), "--manifest", str(manifest)]) == 2
    assert "names ['other.jsonl'], which are not being uploaded" in capsys.readouterr().err
    assert landing_store.list("tenants/") == []


def test_usage_prints_the_months_bill_per_tenant(landing_store, tmp_path, capsys):
    from datetime import datetime, timedelta, timezone

    from ftpipe.metering.ledger import UsageLedger, UsageRecord

    start = datetime(2026, 10, 5, 8, tzinfo=timezone.utc)
    ledger = UsageLedger(tmp_path / "home" / "catalog.duckdb")
    ledger.record(UsageRecord.measure("r1", "acme", "j", 1, "h100x1", 2, 2.5, start, start + timedelta(hours=1),
                                      "completed"))
    ledger.record(UsageRecord.measure("r2", "acme", "j", 2, "h100x1", 2, 2.5, start, start + timedelta(hours=1),
                                      "interrupted"))
    assert main(["usage", "--month", "2026-10"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "GPU usage in 2026-10"
    assert out[2].split() == ["acme", "premium", "2", "2.0000", "2.0000", "0.0000", "5.00"]
