"""Energy settings writes: the site's PUE and constant carbon intensity, and the hourly carbon
intensity series a platform admin uploads as CSV (each audited)."""

from __future__ import annotations

import csv
import io
import math
from datetime import UTC
from decimal import Decimal

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils.dateparse import parse_datetime

from billing.models import CarbonIntensityHour, EnergySettings
from core.roles import is_platform_admin
from queues.services.audit import audit

MAX_SERIES_ROWS = 50_000  # over five years of hours
MAX_ERRORS_SHOWN = 20


def _check_admin(user) -> None:
    if not is_platform_admin(user):
        raise PermissionDenied("Only platform admins set the PUE and the carbon intensity.")


def energy_settings_update(*, actor, pue: Decimal, grams_per_kwh: Decimal | None) -> EnergySettings:
    """Set the site's PUE (1–5) and constant carbon intensity (gCO2e/kWh, or none)."""
    _check_admin(actor)
    errors = {}
    if pue is None or not (Decimal(1) <= pue <= Decimal(5)):
        errors["pue"] = "The PUE is facility energy over IT energy: between 1.00 and 5.00."
    if grams_per_kwh is not None and grams_per_kwh < 0:
        errors["grams_per_kwh"] = "The carbon intensity must be zero or more."
    if errors:
        raise ValidationError(errors)
    current = EnergySettings.current()
    before = {"pue": str(current.pue), "grams_per_kwh": _str(current.grams_per_kwh)}
    current.pue = pue
    current.grams_per_kwh = grams_per_kwh
    current.updated_by = actor
    current.save()
    audit(actor=actor, verb="energy_settings.update", obj=current, before=before,
          after={"pue": str(pue), "grams_per_kwh": _str(grams_per_kwh)})  # fmt: skip
    return current


def _str(value) -> str | None:
    return None if value is None else str(value)


def _csv_rows(text: str, errors: list[str]):
    """The rows of a CSV text, any line ending taken as one; a row the csv module cannot read
    ends the reading with a line error instead of a server error."""
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        yield from reader
    except csv.Error as exc:
        errors.append(f"line {reader.line_num}: {exc}")


def parse_carbon_series(text: str) -> list[tuple]:
    """(hour, gCO2e/kWh) per line of a CSV `hour_start,grams_per_kwh` (a header line is
    allowed). Hours are ISO 8601, on the hour, UTC unless they carry an offset. Every bad line
    is reported: ValidationError({"file": ["line 3: ...", ...]})."""
    errors: list[str] = []
    rows: dict = {}
    for number, cells in enumerate(_csv_rows(text, errors), start=1):
        if not cells or all(not c.strip() for c in cells):
            continue
        if number == 1 and not _is_number(cells[-1]) and _hour(cells[0]) is None:
            continue  # the header
        if len(cells) != 2:
            errors.append(f"line {number}: expected 2 columns (hour start, gCO2e/kWh), "
                          f"got {len(cells)}")  # fmt: skip
            continue
        raw_hour, raw_value = cells[0].strip(), cells[1].strip()
        hour = _hour(raw_hour)
        if hour is None:
            errors.append(f"line {number}: {raw_hour!r} is not an ISO 8601 date and time")
            continue
        if hour.tzinfo is None:
            hour = hour.replace(tzinfo=UTC)
        hour = hour.astimezone(UTC)
        if hour.minute or hour.second or hour.microsecond:
            errors.append(f"line {number}: {raw_hour} is not the start of an hour")
            continue
        try:
            value = float(raw_value)
        except ValueError:
            errors.append(f"line {number}: {raw_value!r} is not a number")
            continue
        if not math.isfinite(value) or value < 0:
            errors.append(f"line {number}: the intensity must be a number, zero or more")
            continue
        if hour in rows:
            errors.append(f"line {number}: {hour:%Y-%m-%d %H:00} UTC is given twice")
            continue
        rows[hour] = value
        if len(rows) > MAX_SERIES_ROWS:
            errors.append(f"more than {MAX_SERIES_ROWS} hours: upload the series in parts")
            break
    if not rows and not errors:
        errors.append("the file has no hours")
    if errors:
        shown = errors[:MAX_ERRORS_SHOWN]
        if len(errors) > MAX_ERRORS_SHOWN:
            shown.append(f"and {len(errors) - MAX_ERRORS_SHOWN} more lines with errors")
        # Each message as a parameter: a line's text may hold "%", which must not be read as
        # a format.
        raise ValidationError({"file": [ValidationError("%(line)s", params={"line": m})
                                        for m in shown]})  # fmt: skip
    return sorted(rows.items())


def _hour(text: str):
    """The date and time an ISO 8601 text names; None when it names none (or no real one)."""
    try:
        return parse_datetime(text.strip())
    except ValueError:
        return None


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def carbon_series_upload(*, actor, data: bytes) -> int:
    """Store (or replace) the hours of an uploaded series; all or nothing. Returns the hours."""
    _check_admin(actor)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValidationError({"file": ["the file is not UTF-8 text"]}) from exc
    rows = parse_carbon_series(text)
    with transaction.atomic():
        CarbonIntensityHour.objects.bulk_create(
            [CarbonIntensityHour(hour=h, grams_per_kwh=v, uploaded_by=actor) for h, v in rows],
            update_conflicts=True,
            unique_fields=["hour"],
            update_fields=["grams_per_kwh", "uploaded_by", "uploaded_at"],
            batch_size=2000,
        )
        audit(actor=actor, verb="carbon_intensity.upload", obj=None,
              after={"hours": len(rows), "first": rows[0][0].isoformat(),
                     "last": rows[-1][0].isoformat()},
              message=f"Uploaded {len(rows)} hours of grid carbon intensity")  # fmt: skip
    return len(rows)
