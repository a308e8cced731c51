"""Tenants' webhooks go out from sensors after a run has ended, once per job, and a slow endpoint is given up on
within the delivery's budget."""

import json
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Thread

from dagster import DagsterEvent, DagsterEventType, DagsterRunStatus, build_run_status_sensor_context, instance_for_test
from dagster._core.test_utils import create_run_for_test

from ftpipe.notify.outbox import write_notice
from ftpipe.notify.webhooks import send_webhook
from sensors.notifications import notify_succeeded_jobs
from tests.helpers.origins import finetune_origin
from tests.helpers.webhook_receiver import SECRET


def _with_webhook(platform_file, url, monkeypatch):
    platform_file.write_text(platform_file.read_text().replace(
        "acme: {tier: premium}", f"acme: {{tier: premium, webhook_url: '{url}', webhook_secret_env: ACME_HOOK}}"))
    monkeypatch.setenv("ACME_HOOK", SECRET)


def test_a_promoted_jobs_notice_is_sent_after_the_run_once_per_job_version(local_resources, platform_file, receiver,
                                                                            monkeypatch):
    url, received, _ = receiver
    _with_webhook(platform_file, url, monkeypatch)
    resources = {k: local_resources[k] for k in ("platform", "artifacts")}
    layout = local_resources["artifacts"].layout()
    with instance_for_test() as instance:
        runs = []
        for attempt in ("1", "2"):  # e.g. a hand launch of the same manifest after the first run
            run = create_run_for_test(instance, job_name="finetune", status=DagsterRunStatus.SUCCESS,
                                      remote_job_origin=finetune_origin(), tags={
                "ftpipe/tenant": "acme", "ftpipe/job": "support-v1", "ftpipe/attempt": attempt,
                "ftpipe/manifest-version": "abc123"})
            write_notice(layout.run_dir("acme", "support-v1", run.run_id), "job.succeeded",
                         {"job": "support-v1", "adapter_id": "acme--support-v1--1", "status": "promoted"})
            runs.append(run)
        # A run that left no notice (it reused a registered training) sends nothing.
        quiet = create_run_for_test(instance, job_name="finetune", status=DagsterRunStatus.SUCCESS,
                                    remote_job_origin=finetune_origin(),
                                    tags={"ftpipe/tenant": "acme", "ftpipe/job": "support-v1"})
        for run in [*runs, quiet]:
            notify_succeeded_jobs(build_run_status_sensor_context(
                sensor_name=notify_succeeded_jobs.name, dagster_instance=instance, dagster_run=run,
                dagster_event=DagsterEvent(DagsterEventType.RUN_SUCCESS.value, "finetune"), resources=resources))
    assert len(received) == 2 and all(d["verified"] for d in received)
    assert {d["headers"]["X-Ftpipe-Delivery"] for d in received} == {"acme/support-v1@abc123:job.succeeded"}
    assert json.loads(received[0]["body"])["adapter_id"] == "acme--support-v1--1"


def test_a_hanging_endpoint_is_given_up_on_within_the_budget():
    class Hang(BaseHTTPRequestHandler):
        def do_POST(self):
            time.sleep(30)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hang)
    Thread(target=server.serve_forever, daemon=True).start()
    started = time.monotonic()
    try:
        delivery = send_webhook(f"http://127.0.0.1:{server.server_port}/", "s", "job.failed", "d1", {},
                                timeout_s=2, budget_s=5, backoff_s=0.1)
    finally:
        server.shutdown()
    assert not delivery.delivered and time.monotonic() - started < 8
    assert any("budget" in e for e in delivery.errors)
