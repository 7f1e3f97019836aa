"""The JSON parser every API endpoint uses (settings' DEFAULT_PARSER_CLASSES)."""

from rest_framework import exceptions, parsers

from core.text import lone_surrogate_message, lone_surrogate_path, scrub


class JSONParser(parsers.JSONParser):
    """JSON bodies, refusing a lone UTF-16 surrogate in any string or key at any depth with a
    400 on the top-level field it is in: no database, page or answer could hold it (see
    core/text.py). One check here covers every field of every endpoint, JSON fields too."""

    def parse(self, stream, media_type=None, parser_context=None):
        data = super().parse(stream, media_type, parser_context)
        path = lone_surrogate_path(data)
        if path is not None:
            field = "non_field_errors"
            if isinstance(data, dict):
                field = next(key for key, item in data.items()
                             if lone_surrogate_path({key: item}) is not None)  # fmt: skip
            raise exceptions.ValidationError({scrub(field): [lone_surrogate_message(path)]})
        return data
