"""The fine-tuning API end to end: the OpenAI SDK against the API on loopback, and the real Dagster daemon
behind it running the upload sensor, the QueuedRunCoordinator and real training on the tiny model."""

import time

import openai
import pytest
from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

from ftpipe import synthetic
from ftpipe.catalog.api_keys import ApiKeys
from ftpipe_api.app import create_app
from ftpipe_api.context import ApiContext
from ftpipe_cli.demo import start_daemon, stop_daemon
from partitions.run_tags import TENANT_TAG
from resources import resources_from_env
from tests.helpers.api_server import serving
from tests.helpers.daemon_home import repo_configs, use_daemon_home, wait_for

pytestmark = pytest.mark.slow

# Long enough to be cancelled while training (~20 s of steps on 2 cores), short enough not to matter if not.
LONG_STEPS = 3000


def test_the_sdk_trains_polls_lists_events_and_checkpoints_cancels_and_reuses_through_the_daemon(
        tmp_path, monkeypatch, tiny_model):
    home = tmp_path / "home"
    instance_config, platform = repo_configs()
    use_daemon_home(home, monkeypatch, instance_config, platform)
    key = ApiKeys(home / "catalog.duckdb").issue("acme", "sdk")[1]
    data = synthetic.to_jsonl(synthetic.acme_support(100)).encode()

    log = home / "daemon.log"
    daemon = start_daemon(log)
    try:
        with DagsterInstance.get() as instance, serving(create_app(
                ApiContext.from_resources(resources_from_env(), lambda: instance))) as url:
            client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)
            train = client.files.create(file=("support.jsonl", data), purpose="fine-tune")
            settings = dict(model="ftpipe/tiny-llama", training_file=train.id, suffix="support",
                            method={"type": "supervised", "supervised": {"hyperparameters": {"n_epochs": 1}}})
            job = client.fine_tuning.jobs.create(**settings)
            seen = set()

            def finished():
                state = client.fine_tuning.jobs.retrieve(job.id)
                seen.add(state.status)
                return state if state.status in ("succeeded", "failed", "cancelled") else None

            done = wait_for("the job to finish", finished, 1200, daemon, log)  # a bound: slow hosts take 2x
            assert done.status == "succeeded", done.error
            assert {"queued", "running"} <= seen or "running" in seen
            assert done.fine_tuned_model and done.fine_tuned_model.startswith(f"acme--{job.id}--")
            assert done.finished_at >= done.created_at

            events = client.fine_tuning.jobs.list_events(job.id, limit=1000).data
            messages = [e.message for e in events]
            assert messages[0] == "The job has successfully completed" and messages[-1].startswith("Created")
            # The first stage's story comes first, and says what it was.
            assert messages.index("Files validated and tokenized; queued for training") > messages.index(
                "Job started (attempt 1)")
            metrics = [e.data for e in events if e.type == "metrics"]
            assert metrics and all(m["total_steps"] == metrics[0]["total_steps"] for m in metrics)
            assert any(m.get("train_loss") for m in metrics) and any(m.get("valid_loss") for m in metrics)
            assert any(m.startswith("Check ") and "passed" in m for m in messages)
            checkpoints = client.fine_tuning.jobs.checkpoints.list(job.id).data
            assert checkpoints and checkpoints[0].step_number == metrics[0]["total_steps"]

            report = client.get(f"/fine_tuning/jobs/{job.id}/report", cast_to=object)
            assert report["validation"]["passed"] and "holdout_exact_match_delta" in report["eval_report"]["estimates"]
            assert f"Adapter `{done.fine_tuned_model}` is **promoted**" in report["quality_gates"]
            assert done.fine_tuned_model in [m.id for m in client.models.list()]

            # The same data and settings again: the job that trained answers, and nothing new runs.
            runs_before = len(instance.get_runs(RunsFilter(tags={TENANT_TAG: "acme"})))
            again = client.fine_tuning.jobs.create(**{**settings, "training_file": client.files.create(
                file=("copy.jsonl", data), purpose="fine-tune").id})
            assert again.id == job.id and again.fine_tuned_model == done.fine_tuned_model
            time.sleep(6)  # a sensor tick: nothing was uploaded, so nothing is queued
            assert len(instance.get_runs(RunsFilter(tags={TENANT_TAG: "acme"}))) == runs_before

            # A long job, cancelled while it trains: its trainer checkpoints and the run ends CANCELED.
            long = client.fine_tuning.jobs.create(**settings, extra_body={"ftpipe": {
                "hyperparameters": {"max_steps": LONG_STEPS}}})
            wait_for("the long job's training", lambda: any(
                e.type == "metrics" for e in client.fine_tuning.jobs.list_events(long.id, limit=50).data),
                600, daemon, log)
            assert client.fine_tuning.jobs.cancel(long.id).status == "cancelled"
            wait_for("the cancellation", lambda: instance.get_runs(RunsFilter(tags={TENANT_TAG: "acme"}))[0].status
                  == DagsterRunStatus.CANCELED, 300, daemon, log)  # the newest run: the GPU stage's
            assert client.fine_tuning.jobs.retrieve(long.id).status == "cancelled"
            stopped = client.fine_tuning.jobs.checkpoints.list(long.id).data
            assert stopped and 0 < stopped[0].step_number < LONG_STEPS
            assert "Job cancelled" in [e.message for e in client.fine_tuning.jobs.list_events(long.id).data]

            # The tenant retires its adapter: the fleet stops loading it, and it cannot come back.
            retired = client.post(f"/adapters/{done.fine_tuned_model}/deprecate", cast_to=object)
            assert retired["status"] == "deprecated"
            assert done.fine_tuned_model not in [m.id for m in client.models.list()]
            with pytest.raises(openai.ConflictError, match="cannot become promoted"):
                client.post(f"/adapters/{done.fine_tuned_model}/promote", cast_to=object)
    finally:
        stop_daemon(daemon)
