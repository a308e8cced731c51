"""Calendar months (UTC) for billing; the current month is included (``end_offset=1``) so its running
total can be refreshed before the month ends."""

from dagster import MonthlyPartitionsDefinition

billing_months = MonthlyPartitionsDefinition(start_date="2026-01-01", end_offset=1)
