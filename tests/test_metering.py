"""GPU metering on its own: classification, the ledger written once per attempt, quotas and the month's bill."""

from datetime import datetime, timedelta, timezone

import pytest

from ftpipe.metering.billing import monthly_bills, statement_markdown
from ftpipe.metering.classify import classify
from ftpipe.metering.ledger import UsageLedger, UsageRecord, month_bounds, month_of
from ftpipe.metering.quota import decide
from ftpipe.tenants import load_platform_config

T0 = datetime(2026, 11, 3, 9, 0, tzinfo=timezone.utc)


def _attempt(run_id, tenant="acme", minutes=60.0, outcome="completed", error_class=None, gpus=1, price=2.5,
             start=T0, attempt=1):
    return UsageRecord.measure(run_id, tenant, "job", attempt, "h100x1", gpus, price, start,
                               start + timedelta(minutes=minutes), outcome, error_class)


@pytest.mark.parametrize(("outcome", "error_class", "category", "billable"), [
    ("completed", None, "completed", True),
    ("failed", "user", "user_error", True),          # bad data, divergence, OOM from the tenant's overrides
    ("failed", "platform", "platform_error", False),  # OOM from a platform-chosen micro-batch
    ("interrupted", None, "preempted", False),
    ("lost", None, "lost", False),                    # node or run worker died
])
def test_who_pays_for_an_attempt(outcome, error_class, category, billable):
    verdict = classify(outcome, error_class)
    assert (verdict.category, verdict.billable) == (category, billable)


def test_an_unknown_outcome_is_refused():
    with pytest.raises(ValueError, match="unknown trainer outcome 'exploded'"):
        classify("exploded")


def test_gpu_seconds_are_wall_time_times_the_slots_gpus():
    usage = _attempt("r1", minutes=30, gpus=4)
    assert usage.gpu_seconds == 30 * 60 * 4
    assert usage.gpu_hours == 2.0 and usage.cost == 5.0 and usage.month == "2026-11"


def test_an_attempt_belongs_to_the_month_it_started_in():
    late = datetime(2026, 11, 30, 23, 30, tzinfo=timezone.utc)
    assert _attempt("r1", start=late, minutes=120).month == "2026-11"
    assert month_of(datetime(2026, 12, 1, 0, 30, tzinfo=timezone(timedelta(hours=2)))) == "2026-11"
    assert month_bounds("2026-12") == (datetime(2026, 12, 1, tzinfo=timezone.utc),
                                       datetime(2027, 1, 1, tzinfo=timezone.utc))


def test_the_ledger_records_an_attempt_once(catalog_at):
    ledger = UsageLedger(catalog_at)
    first = _attempt("run-1", outcome="lost")
    assert ledger.record(first)
    # A duplicate event, even one that disagrees (the sensor's late estimate), never adds or changes a row.
    assert not ledger.record(_attempt("run-1", minutes=600, outcome="completed"))
    assert ledger.record(_attempt("run-2", attempt=2))
    rows = ledger.records(month="2026-11")
    assert [(r.run_id, r.category, r.gpu_seconds) for r in rows] == [("run-1", "lost", 3600.0),
                                                                     ("run-2", "completed", 3600.0)]
    assert rows[0].started_at == T0
    assert ledger.charged_hours("2026-11") == {"acme": 1.0}  # the lost attempt is refunded
    assert ledger.charged_hours("2026-10") == {}


def test_hard_and_soft_quotas():
    assert decide("premium", None, "hard", 1e6, "2026-11").allowed
    # At the sensor (no estimate yet): a hard quota refuses once it is used up.
    assert decide("free", 2, "hard", 1.9, "2026-11").allowed
    refused = decide("free", 2, "hard", 2.0, "2026-11")
    assert not refused.allowed
    assert "free tier's quota is 2 GPU-hours per month and it is a hard limit: 2 GPU-hours used in 2026-11" \
        in refused.message
    # In the pre-flight, the job's own estimate counts.
    crossing = decide("free", 2, "hard", 1.5, "2026-11", estimated_gpu_hours=0.6)
    assert not crossing.allowed and "+ 0.6 estimated for this job" in crossing.message
    soft = decide("standard", 100, "soft", 120, "2026-11")
    assert soft.allowed and soft.over_soft_quota and "billed as overage" in soft.message


def test_the_monthly_bill_charges_completed_and_user_error_attempts_and_prices_overage(tmp_path):
    platform = tmp_path / "tenants.yaml"
    platform.write_text(
        "default_pool: h100x1\n"
        "pools:\n  h100x1: {gpu: H100, gpu_memory_gb: 80, peak_tflops: 989, price_per_gpu_hour: 2.5}\n"
        "tiers:\n  standard: {priority: 5, gpu_hours_per_month: 3, quota: soft, overage_price_multiplier: 1.5}\n"
        "  premium: {priority: 10}\n"
        "tenants:\n  globex: {tier: standard}\n  acme: {tier: premium}\n")
    config = load_platform_config(platform)
    usage = [
        _attempt("g1", "globex", minutes=120),                                    # 2 h, within the quota
        _attempt("g2", "globex", minutes=60, outcome="interrupted",               # refunded
                 start=T0 + timedelta(hours=3)),
        _attempt("g3", "globex", minutes=120, outcome="failed", error_class="user",  # 2 h: 1 h over
                 start=T0 + timedelta(hours=5)),
        _attempt("a1", "acme", minutes=90, gpus=2),
        _attempt("old", "acme", start=T0 - timedelta(days=30)),                   # October
    ]
    bills = {b.tenant: b for b in monthly_bills(usage, config, "2026-11")}
    globex, acme = bills["globex"], bills["acme"]
    assert (globex.attempts, globex.gpu_hours, globex.refunded_gpu_hours) == (3, 4.0, 1.0)
    assert (globex.cost, globex.refunded_cost) == (10.0, 2.5)
    assert globex.overage_gpu_hours == 1.0 and globex.overage_cost == pytest.approx(1.25)  # 1 h x 2.5 x 0.5
    assert globex.total == pytest.approx(11.25)
    assert (acme.attempts, acme.gpu_hours, acme.overage_gpu_hours, acme.total) == (1, 3.0, 0.0, 7.5)
    statement = statement_markdown(globex, [u for u in usage if u.tenant == "globex"])
    assert "| job | 1 | 2026-11-03 12:00:00 | h100x1 | 1 | 1.0000 | preempted | refunded |" in statement
    assert "- total due: 11.25" in statement
