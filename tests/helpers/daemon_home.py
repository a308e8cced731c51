"""A home for the tests that run the real Dagster daemon: the repo's dagster.yaml and tenants.yaml, as each
test changes them, written where the daemon and the test's own instance read them."""

import time
from pathlib import Path

import psutil
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]


def repo_configs() -> tuple[dict, dict]:
    """(instance config, platform config) as the repo ships them, for a test to change."""
    return (yaml.safe_load((REPO_ROOT / "dagster.yaml").read_text()),
            yaml.safe_load((REPO_ROOT / "tenants.yaml").read_text()))


def use_daemon_home(home: Path, monkeypatch, instance_config: dict, platform: dict) -> None:
    """Write both configs under ``home`` and point the environment at them. What the daemon tests put under test
    is the queue and recovery: no quality gate may fail their runs, and four golden questions are enough to
    evaluate them (the whole set is the end-to-end test's)."""
    dagster_home = home / "dagster_home"
    dagster_home.mkdir(parents=True)
    (dagster_home / "dagster.yaml").write_text(yaml.safe_dump(instance_config))
    platform["evaluation"]["quality_gates"] = {}
    golden = REPO_ROOT / "ftpipe" / "evaluation" / "golden" / "general-v1.jsonl"
    (home / "golden.jsonl").write_text("".join(golden.read_text().splitlines(keepends=True)[:4]))
    platform["evaluation"]["golden_set"] = str(home / "golden.jsonl")
    (home / "tenants.yaml").write_text(yaml.safe_dump(platform))
    monkeypatch.setenv("FTPIPE_HOME", str(home))
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home))
    monkeypatch.setenv("FTPIPE_TENANTS", str(home / "tenants.yaml"))


def wait_for(what: str, condition, timeout_s: float, daemon, log: Path, every_s: float = 0.5):
    """``condition()``'s first truthy value, checking that the daemon still runs; its log's tail on a timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        assert daemon.poll() is None, f"the daemon exited: {log.read_text()[-3000:]}"
        time.sleep(every_s)
    raise AssertionError(f"timed out waiting for {what}; daemon log:\n{log.read_text()[-3000:]}")


def trainers(daemon) -> list[psutil.Process]:
    """The trainer processes under the daemon: its run workers' Pipes subprocesses."""
    found = []
    for child in psutil.Process(daemon.pid).children(recursive=True):
        try:
            if "ftpipe.training.pipes_main" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.Error:  # exited, or a zombie
            continue
    return found
