"""Who a user is, kept between requests: their groups, the teams they see, their team roles.

Every page and API request asks these before reading its own rows (three queries of its
dozen). They change rarely, so with a cache that every process shares (CACHE_URL, Redis in
production) they are kept there for up to PRINCIPAL_CACHE_SECONDS under a generation token, and
any change to what they are read from (memberships, teams, departments and their managers, users
and their groups) replaces the token once it commits: the next request reads them afresh. With a
per-process cache (the default local memory) nothing is kept between requests, as one process
would go on trusting what another had changed.

Nothing is read from or written to the shared cache inside a transaction: a transaction may be
changing these very rows, and what it reads before committing (or rolling back) is nobody
else's truth. A cache that fails to answer is passed over (the rows are read, as without it).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import connection, transaction

logger = logging.getLogger(__name__)

GENERATION_KEY = "qm:principal:generation"
_PER_PROCESS = (
    "django.core.cache.backends.locmem.LocMemCache",
    "django.core.cache.backends.dummy.DummyCache",
)
_MISSING = object()
# Changes this process has made: a user object's copy taken before one is not used after it
# (a test, a task or a request that changes roles and then asks again).
_local_changes = 0


def shared() -> bool:
    """True when what is cached here is kept between requests (a shared cache, a positive TTL)."""
    return (
        settings.PRINCIPAL_CACHE_SECONDS > 0
        and settings.CACHES["default"]["BACKEND"] not in _PER_PROCESS
    )


def _user_key(user_id: int) -> str:
    return f"qm:principal:user:{user_id}"


def _entry(user) -> dict:
    """The request's copy of the user's parts: {"generation": token or None, "parts": {...},
    "local": the process's changes when it was taken}."""
    entry = user.__dict__.get("_qm_principal")
    if entry is None or entry["local"] != _local_changes:
        entry = {"generation": None, "parts": {}, "local": _local_changes}
        if shared() and not connection.in_atomic_block:
            try:
                got = cache.get_many([GENERATION_KEY, _user_key(user.pk)])
                generation = got.get(GENERATION_KEY)
                if generation is None:
                    cache.add(GENERATION_KEY, uuid.uuid4().hex, None)
                    generation = cache.get(GENERATION_KEY)
            except Exception:  # the cache is down or refuses: read the rows
                logger.warning("principal cache unavailable", exc_info=True)
            else:
                entry["generation"] = generation
                kept = got.get(_user_key(user.pk))
                if kept and generation is not None and kept.get("generation") == generation:
                    entry["parts"] = dict(kept["parts"])
        user.__dict__["_qm_principal"] = entry
    return entry


def principal_part(user, name: str, compute: Callable[[], Any]) -> Any:
    """The user's `name` part (`compute()` reads it from the database when not kept), kept on
    the user object for the request and, where shared() holds, in the cache between requests."""
    entry = _entry(user)
    value = entry["parts"].get(name, _MISSING)
    if value is not _MISSING:
        return value
    value = compute()
    entry["parts"][name] = value
    generation = entry["generation"]
    if generation is not None and shared() and not connection.in_atomic_block:
        try:
            cache.set(
                _user_key(user.pk),
                {"generation": generation, "parts": entry["parts"]},
                settings.PRINCIPAL_CACHE_SECONDS,
            )
        except Exception:
            logger.warning("principal cache unavailable", exc_info=True)
    return value


def principal_forget(user) -> None:
    """Drop the request's copy (after changing the user's roles within the request)."""
    user.__dict__.pop("_qm_principal", None)


def _new_generation() -> None:
    try:
        cache.set(GENERATION_KEY, uuid.uuid4().hex, None)
    except Exception:  # what is kept expires within PRINCIPAL_CACHE_SECONDS
        logger.warning("principal cache generation not replaced", exc_info=True)


def principal_changed(**_kwargs) -> None:
    """Receiver for every change that can alter who someone is: once the change commits, no
    request uses what was kept before it (and in this process, at once, no copy taken before)."""
    global _local_changes
    _local_changes += 1
    if shared():
        transaction.on_commit(_new_generation)


def user_saved(*, update_fields=None, **kwargs) -> None:
    """A user's save changes who they are, except the one every sign-in makes."""
    if update_fields is not None and set(update_fields) <= {"last_login"}:
        return
    principal_changed(**kwargs)
