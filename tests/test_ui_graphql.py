"""Materializing a tenant partition from the UI: the real webserver's GraphQL API, no run config typed.

The UI's Materialize button on the asset graph sends a launchRun for the implicit asset job with the asset
selection and the partition as a tag; this test sends the same request over HTTP and checks the run is
accepted into the queue without any config.
"""

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from dagster import DagsterInstance
from dagster_graphql import DagsterGraphQLClient

from ft_assets.definitions import ASSETS
from partitions.tenant_jobs import tenant_jobs_partitions

REPO_ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def webserver(tmp_path):
    dagster_home = tmp_path / "dagster_home"
    dagster_home.mkdir()
    shutil.copy(REPO_ROOT / "dagster.yaml", dagster_home / "dagster.yaml")
    port = _free_port()
    env = {**os.environ, "DAGSTER_HOME": str(dagster_home), "FTPIPE_HOME": str(tmp_path / "home")}
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "dagster-webserver"), "-w", "workspace.yaml", "-h", "127.0.0.1",
         "-p", str(port)], cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if requests.get(f"http://127.0.0.1:{port}/server_info", timeout=2).ok:
                    break
            except requests.ConnectionError:
                time.sleep(1)
        else:
            raise TimeoutError("dagster-webserver did not start")
        yield port, dagster_home
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_ui_materialize_of_a_partition_needs_no_config(webserver):
    port, dagster_home = webserver
    with DagsterInstance.from_config(str(dagster_home)) as instance:
        instance.add_dynamic_partitions("tenant_jobs", ["acme__support-v1"])
    client = DagsterGraphQLClient("127.0.0.1", port_number=port)
    run_id = client.submit_job_execution(
        "__ASSET_JOB",
        # A tenant's partition: the assets partitioned by tenant job (billing is by month, monitoring unpartitioned).
        asset_selection=[a.key for a in ASSETS if a.partitions_def == tenant_jobs_partitions],
        tags={"dagster/partition": "acme__support-v1"},
    )
    assert client.get_run_status(run_id).value == "QUEUED"
    with DagsterInstance.from_config(str(dagster_home)) as instance:
        run = instance.get_run_by_id(run_id)
    assert run.tags["dagster/partition"] == "acme__support-v1"
    assert run.run_config in ({}, None) or not run.run_config.get("ops")
