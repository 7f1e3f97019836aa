"""Template filters for durations: `{{ seconds|duration }}` reads "37 min", "5 d 2 h"."""

from django import template

from core.durations import duration_text

register = template.Library()


@register.filter
def duration(seconds):
    """Seconds as people read them (core.durations.duration_text)."""
    return duration_text(seconds)
