"""Durations as people read them: "45 s", "37 min", "2 h 5 min", "5 d 2 h"."""

from __future__ import annotations

MINUTE, HOUR, DAY = 60, 3600, 86400


def duration_text(seconds) -> str:
    """A number of seconds in its two largest units, rounded to the smaller one (under a
    minute: seconds; under an hour: minutes; under a day: hours and minutes; else days and
    hours); "—" when unknown."""
    if seconds is None or seconds == "":
        return "—"
    try:
        total = float(seconds)
    except (TypeError, ValueError):
        return "—"
    if total != total:  # NaN
        return "—"
    sign, total = ("−", -total) if total < 0 else ("", total)
    if total < MINUTE:
        return f"{sign}{round(total)} s" if round(total) < MINUTE else f"{sign}1 min"
    if total < HOUR:
        minutes = round(total / MINUTE)
        return f"{sign}{minutes} min" if minutes < 60 else f"{sign}1 h"
    if total < DAY:
        minutes = round(total / MINUTE)
        hours, minutes = divmod(minutes, 60)
        if hours >= 24:
            return f"{sign}1 d"
        return f"{sign}{hours} h {minutes} min" if minutes else f"{sign}{hours} h"
    hours = round(total / HOUR)
    days, hours = divmod(hours, 24)
    return f"{sign}{days} d {hours} h" if hours else f"{sign}{days} d"
