"""A real dagster-webserver on loopback, for tests that drive the UI's GraphQL API."""

import os
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import requests

REPO_ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running_webserver(env: dict | None = None, log: Path | None = None):
    """Yields the port of a webserver on the repo's workspace.yaml, with ``env`` (DAGSTER_HOME, FTPIPE_HOME...)."""
    port = _free_port()
    out = open(log, "ab") if log else subprocess.DEVNULL
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "dagster-webserver"), "-w", "workspace.yaml", "-h", "127.0.0.1",
         "-p", str(port)], cwd=REPO_ROOT, env={**os.environ, **(env or {})}, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert proc.poll() is None, "dagster-webserver exited"
            try:
                if requests.get(f"http://127.0.0.1:{port}/server_info", timeout=2).ok:
                    break
            except requests.ConnectionError:
                time.sleep(1)
        else:
            raise TimeoutError("dagster-webserver did not start")
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def graphql(port: int, query: str, variables: dict | None = None) -> dict:
    response = requests.post(f"http://127.0.0.1:{port}/graphql", json={"query": query, "variables": variables or {}},
                             timeout=60)
    response.raise_for_status()
    body = response.json()
    assert "errors" not in body, body["errors"]
    return body["data"]


INSTIGATORS = """
query {
  workspaceOrError { ... on Workspace { locationEntries { locationOrLoadError {
    ... on RepositoryLocation { repositories {
      sensors { name sensorState { status } }
      schedules { name scheduleState { status } }
    } }
  } } } }
}
"""


def instigator_states(port: int) -> dict[str, str]:
    """Every sensor's and schedule's status as the UI shows it: name -> RUNNING or STOPPED."""
    states = {}
    for entry in graphql(port, INSTIGATORS)["workspaceOrError"]["locationEntries"]:
        for repo in entry["locationOrLoadError"]["repositories"]:
            states.update({s["name"]: s["sensorState"]["status"] for s in repo["sensors"]})
            states.update({s["name"]: s["scheduleState"]["status"] for s in repo["schedules"]})
    return states


CHECK_EXECUTIONS = """
query ($asset: [String!]!, $check: String!, $partition: String) {
  assetCheckExecutions(assetKey: {path: $asset}, checkName: $check, limit: 50, partition: $partition) {
    runId status partition evaluation { description }
  }
}
"""


def check_executions(port: int, asset: str, check: str, partition: str | None = None) -> list[dict]:
    return graphql(port, CHECK_EXECUTIONS, {"asset": [asset], "check": check, "partition": partition}
                   )["assetCheckExecutions"]


RUNS = """
query ($partition: String!) {
  runsOrError(filter: {tags: [{key: "dagster/partition", value: $partition}]}) {
    ... on Runs { results { runId status tags { key value } } }
  }
}
"""


def runs_of(port: int, partition: str) -> list[dict]:
    """The partition's runs as the Runs list shows them, oldest first, each with its tags as a dict."""
    results = graphql(port, RUNS, {"partition": partition})["runsOrError"]["results"]
    return [{**r, "tags": {t["key"]: t["value"] for t in r["tags"]}} for r in reversed(results)]
