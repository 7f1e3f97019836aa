"""Calendar periods of billing, pure: months and UTC days as half-open ranges, YYYY-MM parsing."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta

MONTH_RE = re.compile(r"^(\d{4})-(0[1-9]|1[0-2])$")
# Months a report can be about: a four-digit year whose next month still has one.
FIRST_YEAR, LAST_YEAR = 1970, 9998


def month_start(value: date | datetime) -> date:
    """The first day of the month `value` falls in."""
    return date(value.year, value.month, 1)


def next_month(month: date) -> date:
    """The first day of the month after `month`."""
    return date(month.year + (month.month == 12), month.month % 12 + 1, 1)


def month_bounds(month: date) -> tuple[datetime, datetime]:
    """The month as a half-open UTC range [first midnight, next month's first midnight)."""
    return midnight(date(month.year, month.month, 1)), midnight(next_month(month))


def parse_month(value: str) -> date | None:
    """`YYYY-MM` → the first day of that month; None when the text is not a month."""
    match = MONTH_RE.fullmatch(value or "")
    if not match or not FIRST_YEAR <= int(match.group(1)) <= LAST_YEAR:
        return None
    return date(int(match.group(1)), int(match.group(2)), 1)


def midnight(day: date) -> datetime:
    """The start of a UTC day."""
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def ceil_day(moment: datetime) -> date:
    """The first UTC day that starts at or after `moment`."""
    day = moment.astimezone(UTC).date()
    return day if moment.astimezone(UTC) == midnight(day) else day + timedelta(days=1)
