"""The billing roll-up's schedule: the current month every night, and the month before on the 1st."""

from datetime import datetime, timezone

from dagster import build_schedule_context

from ft_assets.billing import billing_schedule


def _keys(moment: datetime) -> list[str]:
    return [r.partition_key for r in billing_schedule(build_schedule_context(scheduled_execution_time=moment))]


def test_a_night_mid_month_refreshes_the_running_total():
    assert _keys(datetime(2026, 11, 22, 4, tzinfo=timezone.utc)) == ["2026-11-01"]


def test_the_first_of_the_month_also_closes_the_month_before():
    assert _keys(datetime(2027, 1, 1, 4, tzinfo=timezone.utc)) == ["2027-01-01", "2026-12-01"]
