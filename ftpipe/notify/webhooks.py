"""Webhooks: a tenant's endpoint hears when its job succeeded, failed, or was held back by a quality gate.

Each delivery is a JSON body signed with HMAC-SHA256 over ``{timestamp}.{body}`` with the tenant's secret,
in the manner of Stripe's and GitHub's webhooks, so that the receiver can check that the platform sent it and
refuse a replay of an old one:

    X-Ftpipe-Event:      job.succeeded | job.failed | job.gate_failed
    X-Ftpipe-Delivery:   a stable id for the event: the receiver drops a repeated delivery of the same id
    X-Ftpipe-Timestamp:  unix seconds when it was signed
    X-Ftpipe-Signature:  sha256=<hex HMAC of "{timestamp}.{body}">

A delivery that fails (a connection error, a timeout, a 5xx or 429 answer) is retried with exponential
backoff, within a short total budget (a tenant's slow endpoint must not hold a sensor tick or a GPU slot);
a 4xx answer other than 429 is the receiver's refusal and is not retried. The secret never appears in
the platform's configuration files: the tenant configuration names the environment variable that holds it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field

EVENTS = ("job.succeeded", "job.failed", "job.gate_failed")
SIGNATURE_HEADER = "X-Ftpipe-Signature"
TIMESTAMP_HEADER = "X-Ftpipe-Timestamp"


def sign(secret: str, timestamp: int, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def verify(secret: str, headers, body: bytes, now: float | None = None, tolerance_s: int = 300) -> bool:
    """What a receiver runs: the signature matches and the timestamp is recent (no replay)."""
    try:
        timestamp = int(headers[TIMESTAMP_HEADER])
    except (KeyError, TypeError, ValueError):
        return False
    if abs((now if now is not None else time.time()) - timestamp) > tolerance_s:
        return False
    return hmac.compare_digest(sign(secret, timestamp, body), headers.get(SIGNATURE_HEADER, ""))


@dataclass
class Delivery:
    event: str
    delivery_id: str
    attempts: int = 0
    status: int | None = None
    delivered: bool = False
    errors: list[str] = field(default_factory=list)


def send_webhook(url: str, secret: str, event: str, delivery_id: str, payload: dict, max_attempts: int = 5,
                 backoff_s: float = 1.0, timeout_s: float = 5.0, budget_s: float = 12.0,
                 sleep: Callable[[float], None] = time.sleep) -> Delivery:
    if event not in EVENTS:
        raise ValueError(f"unknown event {event!r} (events: {', '.join(EVENTS)})")
    body = json.dumps({"event": event, "delivery_id": delivery_id, **payload}, sort_keys=True).encode()
    delivery = Delivery(event, delivery_id)
    deadline = time.monotonic() + budget_s
    for attempt in range(1, max_attempts + 1):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            delivery.errors.append(f"gave up: the {budget_s:g} s budget for this delivery is spent")
            break
        delivery.attempts = attempt
        timestamp = int(time.time())
        request = urllib.request.Request(url, data=body, method="POST", headers={
            "Content-Type": "application/json", "User-Agent": "ftpipe-webhooks/1",
            "X-Ftpipe-Event": event, "X-Ftpipe-Delivery": delivery_id,
            TIMESTAMP_HEADER: str(timestamp), SIGNATURE_HEADER: sign(secret, timestamp, body),
        })
        try:
            with urllib.request.urlopen(request, timeout=min(timeout_s, remaining)) as response:
                delivery.status = response.status
                delivery.delivered = True
                return delivery
        except urllib.error.HTTPError as exc:
            delivery.status = exc.code
            delivery.errors.append(f"HTTP {exc.code}")
            if exc.code < 500 and exc.code != 429:
                return delivery  # the receiver refused it; sending it again would not change its mind
        except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
            delivery.errors.append(str(getattr(exc, "reason", exc)))
        pause = backoff_s * 2 ** (attempt - 1)
        if attempt < max_attempts and time.monotonic() + pause < deadline:
            sleep(pause)
        elif attempt < max_attempts:
            delivery.errors.append(f"gave up: the {budget_s:g} s budget for this delivery is spent")
            break
    return delivery


def notify_tenant(config, tenant: str, event: str, delivery_id: str, payload: dict,
                  log: Callable[[str], None] = print, **send_options) -> Delivery | None:
    """Send ``event`` to the tenant's webhook, if it has one (``config``: the ``PlatformConfig``).

    A delivery that cannot be made is logged, never raised: a tenant's broken endpoint must not fail a job.
    """
    tenant_config = config.tenants.get(tenant)
    if tenant_config is None or not tenant_config.webhook_url:
        return None
    secret = os.environ.get(tenant_config.webhook_secret_env or "")
    if not secret:
        log(f"webhook {event} for {tenant} not sent: its secret variable "
            f"{tenant_config.webhook_secret_env or '(webhook_secret_env)'} is not set")
        return None
    delivery = send_webhook(tenant_config.webhook_url, secret, event, delivery_id,
                            {"tenant": tenant, **payload}, **send_options)
    outcome = "delivered" if delivery.delivered else f"not delivered ({'; '.join(delivery.errors)})"
    log(f"webhook {event} for {tenant}: {outcome} after {delivery.attempts} attempt(s)")
    return delivery
