"""What an operator gets from the UI on a fresh instance: the real webserver's GraphQL API over HTTP.

The UI's Materialize button on the asset graph sends a launchRun for the implicit asset job with the asset
selection and the partition as a tag; these tests send the same request with Dagster's own GraphQL client.
"""

import shutil
from pathlib import Path

import pytest
from dagster import DagsterInstance
from dagster_graphql import DagsterGraphQLClient, DagsterGraphQLClientError

from ft_assets.definitions import ASSETS, defs
from ftpipe import synthetic
from ftpipe.objectstore import LocalObjectStore
from ftpipe.submission import default_manifest, submit_job
from partitions.tenant_jobs import tenant_jobs_partitions
from tests.helpers.webserver import instigator_states, running_webserver

REPO_ROOT = Path(__file__).resolve().parents[1]
TENANT_ASSETS = [a.key for a in ASSETS if a.partitions_def == tenant_jobs_partitions]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def webserver(tmp_path_factory):
    """A fresh instance (the repo's dagster.yaml, nothing run yet) and a landing zone with one upload."""
    root = tmp_path_factory.mktemp("ui")
    dagster_home = root / "dagster_home"
    dagster_home.mkdir()
    shutil.copy(REPO_ROOT / "dagster.yaml", dagster_home / "dagster.yaml")
    submit_job(LocalObjectStore(root / "home" / "landing"), "acme", "support-v1",
               {"t.jsonl": synthetic.to_jsonl(synthetic.acme_support(20)).encode()}, default_manifest("t.jsonl"))
    with running_webserver({"DAGSTER_HOME": str(dagster_home), "FTPIPE_HOME": str(root / "home")}) as port:
        yield port, dagster_home


def test_a_fresh_instance_has_every_sensor_and_schedule_running(webserver):
    port, _ = webserver
    states = instigator_states(port)
    assert set(states) == {s.name for s in defs.sensors} | {s.name for s in defs.schedules}
    assert {name for name, status in states.items() if status != "RUNNING"} == set()


def test_ui_materialize_of_a_partition_needs_no_config_and_is_routed_like_an_upload(webserver):
    port, dagster_home = webserver
    with DagsterInstance.from_config(str(dagster_home)) as instance:
        instance.add_dynamic_partitions("tenant_jobs", ["acme__support-v1"])
    client = DagsterGraphQLClient("127.0.0.1", port_number=port)
    run_id = client.submit_job_execution("__ASSET_JOB", asset_selection=TENANT_ASSETS,
                                         tags={"dagster/partition": "acme__support-v1"})
    assert client.get_run_status(run_id).value == "QUEUED"
    with DagsterInstance.from_config(str(dagster_home)) as instance:
        run = instance.get_run_by_id(run_id)
    assert run.run_config in ({}, None) or not run.run_config.get("ops")
    assert {k: run.tags[k] for k in ("ftpipe/tenant", "ftpipe/pool", "ftpipe/attempt", "ftpipe/kind")} == {
        "ftpipe/tenant": "acme", "ftpipe/pool": "cpu-local", "ftpipe/attempt": "1", "ftpipe/kind": "tenant-job"}


@pytest.mark.parametrize("tags, reason", [
    ({"dagster/partition": "acme__does-not-exist"}, "has no upload"),
    ({}, "needs a partition"),
])
def test_ui_materialize_with_nothing_to_run_is_refused_with_the_reason(webserver, tags, reason):
    port, dagster_home = webserver
    client = DagsterGraphQLClient("127.0.0.1", port_number=port)
    with pytest.raises(DagsterGraphQLClientError) as refused:
        client.submit_job_execution("__ASSET_JOB", asset_selection=TENANT_ASSETS, tags=tags)
    assert reason in str(refused.value)
    with DagsterInstance.from_config(str(dagster_home)) as instance:
        (run,) = [r for r in instance.get_runs(limit=5) if r.tags.get("ftpipe/error-class") == "user"
                  and r.tags.get("dagster/partition") == tags.get("dagster/partition")]
    assert run.status.value == "FAILURE" and reason in run.tags["ftpipe/outcome"]
