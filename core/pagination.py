"""Keyset pagination for long lists (jobs, audit events): pages by "older than this id", so a
page deep in a million rows costs what the first does; no count, no offset."""

from __future__ import annotations

from dataclasses import dataclass, field

from core.text import ascii_digits


@dataclass
class KeysetPage:
    object_list: list = field(default_factory=list)
    before: int | None = None  # the cursor this page was asked with (None: the newest)
    next_before: int | None = None  # the cursor of the next (older) page, when there is one

    @property
    def has_next(self) -> bool:
        return self.next_before is not None

    @property
    def has_previous(self) -> bool:
        return self.before is not None

    @property
    def has_other_pages(self) -> bool:
        return self.has_next or self.has_previous


def keyset_page(queryset, *, before: str | None, size: int) -> KeysetPage:
    """The `size` newest rows with an id below `before` (the newest when it is not a number),
    ordered newest first by id."""
    cursor = int(before) if ascii_digits(before) and len(before) < 19 else None
    rows = queryset.order_by("-pk")
    if cursor is not None:
        rows = rows.filter(pk__lt=cursor)
    found = list(rows[: size + 1])
    more = len(found) > size
    found = found[:size]
    return KeysetPage(
        object_list=found, before=cursor, next_before=found[-1].pk if more and found else None
    )
