"""Durations read as people read them, in Python and in templates."""

import pytest
from django.template import Context, Template

from core.durations import duration_text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0 s"), (2.0, "2 s"), (59.4, "59 s"), (59.6, "1 min"), (60, "1 min"),
        (2220, "37 min"), (3599, "1 h"), (3600, "1 h"), (3900, "1 h 5 min"),
        (86399, "1 d"), (86400, "1 d"), (5 * 86400 + 2 * 3600, "5 d 2 h"),
        (5 * 86400 + 2 * 3600 + 1700, "5 d 2 h"), (-90, "−2 min"),
        (None, "—"), ("", "—"), ("soon", "—"), (float("nan"), "—"), ("120", "2 min"),
    ],
)  # fmt: skip
def test_duration_text(seconds, text):
    assert duration_text(seconds) == text


def test_the_template_filter_reads_seconds_as_people_do():
    template = Template("{% load durations %}{{ a|duration }} / {{ b|duration }} / "
                        "{{ c|duration }}")  # fmt: skip
    assert template.render(Context({"a": 2220.0, "b": 440000, "c": None})) == "37 min / 5 d 2 h / —"
