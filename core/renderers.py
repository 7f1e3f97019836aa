"""The JSON renderer every API endpoint uses (settings' DEFAULT_RENDERER_CLASSES)."""

from rest_framework import renderers

from core.text import finite, scrub


class JSONRenderer(renderers.JSONRenderer):
    """DRF's JSON renderer; a lone surrogate in what it renders (a value stored before input
    was checked, or read from a cluster) is written as U+FFFD, and a float JSON has no word for
    (infinity, NaN) as null, instead of failing the answer."""

    def render(self, data, accepted_media_type=None, renderer_context=None):
        try:
            return super().render(data, accepted_media_type, renderer_context)
        except (UnicodeEncodeError, ValueError):  # ValueError: "Out of range float values ..."
            return super().render(finite(scrub(data)), accepted_media_type, renderer_context)
