"""Text that every layer can store, render and send: a lone UTF-16 surrogate (what JSON's
"\\ud800" decodes to) has no UTF-8 form, so PostgreSQL refuses it, SQLite keeps it only inside
JSON text, and encoding a page or an answer that holds one fails. Input is refused where it
comes in (core.api's parser, core.forms); what is rendered is scrubbed all the same (U+FFFD)."""

from __future__ import annotations

import json
import math
import re

# In a Python str every code point in this range is lone: a valid pair decodes to one
# character above U+FFFF.
LONE_SURROGATE = re.compile("[\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def lone_surrogate_path(value, path: str = "") -> str | None:
    """Where in a decoded JSON value (strings, keys, lists, objects) the first lone surrogate
    is, as `field[2].key`; None when there is none."""
    if isinstance(value, str):
        return path if LONE_SURROGATE.search(value) else None
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if isinstance(key, str) and LONE_SURROGATE.search(key):
                return scrub(where)
            found = lone_surrogate_path(item, where)
            if found is not None:
                return found
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            found = lone_surrogate_path(item, f"{path}[{index}]")
            if found is not None:
                return found
    return None


def lone_surrogate_message(path: str) -> str:
    where = f" (at {scrub(path)})" if path else ""
    return (
        f"Text may not contain a lone UTF-16 surrogate such as \\ud800{where}: it is not a "
        "character. Send the character itself, or both halves of a surrogate pair."
    )


def scrub(value):
    """The value with every lone surrogate replaced by U+FFFD, at any depth (keys too)."""
    if isinstance(value, str):
        return LONE_SURROGATE.sub(REPLACEMENT, value) if LONE_SURROGATE.search(value) else value
    if isinstance(value, dict):
        return {scrub(key): scrub(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrub(item) for item in value]
    return value


def finite(value):
    """The value with every float JSON cannot write (infinity, NaN) made None, at any depth."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(item) for item in value]
    return value


def ascii_digits(text) -> bool:
    """True for a non-empty run of 0-9 only. str.isdigit() also takes "²" or "٣", which int()
    refuses or reads as another number."""
    return isinstance(text, str) and text.isascii() and text.isdigit()


def repair_lone_surrogates(apps, schema_editor, *, app_label: str) -> None:
    """A data migration's step: in every JSON column of the app's models, replace each lone
    surrogate a row holds with U+FFFD. Only SQLite can hold one (in the JSON text as an escape,
    written before input was checked); PostgreSQL's jsonb and text never could."""
    connection = schema_editor.connection
    if connection.vendor != "sqlite":
        return
    for model in apps.get_app_config(app_label).get_models():
        table = connection.ops.quote_name(model._meta.db_table)
        pk = model._meta.pk
        for field in model._meta.concrete_fields:
            if field.get_internal_type() != "JSONField":
                continue
            column = connection.ops.quote_name(field.column)
            with connection.cursor() as cursor:
                # Surrogates are escaped in the stored text (\ud800 to \udfff; LIKE ignores case).
                cursor.execute(
                    f"SELECT {connection.ops.quote_name(pk.column)}, {column} FROM {table} "
                    f"WHERE {column} LIKE '%\\ud%'"
                )
                rows = cursor.fetchall()
            for key, text in rows:
                value = json.loads(text)
                if lone_surrogate_path(value) is not None:
                    model.objects.filter(pk=key).update(**{field.name: scrub(value)})


def count(number, word: str, plural: str = "") -> str:
    """ "1 GPU", "12 GPUs", "1 MIG slice"; `plural` for words that do not take an s."""
    return f"{number} {word if number == 1 else plural or word + 's'}"
