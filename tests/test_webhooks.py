"""Webhook deliveries against a real local HTTP server that verifies the signature as a tenant's would."""

import json
import time

from ftpipe.notify.webhooks import SIGNATURE_HEADER, TIMESTAMP_HEADER, send_webhook, sign, verify
from tests.helpers.webhook_receiver import SECRET


def test_the_receiver_verifies_the_signature_and_reads_the_event(receiver):
    url, received, _ = receiver
    delivery = send_webhook(url, SECRET, "job.succeeded", "run-1:job.succeeded",
                            {"tenant": "acme", "job": "support-v1", "adapter_id": "acme--support-v1--1"})
    assert delivery.delivered and delivery.attempts == 1 and delivery.status == 200
    (got,) = received
    assert got["verified"]
    assert got["headers"]["X-Ftpipe-Event"] == "job.succeeded"
    assert json.loads(got["body"])["adapter_id"] == "acme--support-v1--1"
    assert SECRET not in got["body"].decode() and SECRET not in json.dumps(got["headers"])


def test_a_forged_tampered_or_replayed_delivery_fails_verification():
    body = b'{"event": "job.succeeded"}'
    now = int(time.time())
    good = {TIMESTAMP_HEADER: str(now), SIGNATURE_HEADER: sign(SECRET, now, body)}
    assert verify(SECRET, good, body)
    assert not verify("another-secret", good, body)
    assert not verify(SECRET, good, body.replace(b"succeeded", b"failed"))
    assert not verify(SECRET, good, body, now=now + 3600)  # an old delivery sent again
    assert not verify(SECRET, {SIGNATURE_HEADER: good[SIGNATURE_HEADER]}, body)


def test_server_errors_are_retried_with_backoff_and_refusals_are_not(receiver):
    url, received, statuses = receiver
    waits = []
    statuses += [503, 500]
    delivery = send_webhook(url, SECRET, "job.failed", "run-2:job.failed", {"tenant": "acme"}, sleep=waits.append)
    assert delivery.delivered and delivery.attempts == 3 and waits == [1.0, 2.0]
    assert len(received) == 3 and all(r["verified"] for r in received)
    assert len({r["headers"]["X-Ftpipe-Delivery"] for r in received}) == 1  # one event, deduplicated by id

    statuses += [410]
    gone = send_webhook(url, SECRET, "job.failed", "run-3:job.failed", {}, sleep=waits.append)
    assert not gone.delivered and gone.attempts == 1 and gone.status == 410


def test_an_unreachable_endpoint_gives_up_after_the_last_attempt():
    waits = []
    delivery = send_webhook("http://127.0.0.1:9/hook", SECRET, "job.gate_failed", "run-4:job.gate_failed", {},
                            max_attempts=3, sleep=waits.append, timeout_s=2)
    assert not delivery.delivered and delivery.attempts == 3 and waits == [1.0, 2.0]
    assert len(delivery.errors) == 3
