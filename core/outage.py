"""When the database does not answer (restarting, failing over, out of connections): every page
and API endpoint answers 503 with Retry-After and a message a person can act on, not a 500;
and the worker's retry policy (core.worker) treats the same errors as transient.

The middleware answers for errors raised by views; core.views.error answers for those raised
anywhere else in the request (a session saved on the way out, say), so that no request meets
a 500 for an outage."""

from __future__ import annotations

import contextlib
import logging

from django.db import InterfaceError, OperationalError, connections
from django.http import HttpResponse, JsonResponse
from django.template.loader import render_to_string

log = logging.getLogger(__name__)

# The errors of a database that is not there: refused, reset, terminated by an administrator,
# or a connection that broke under the request. Django wraps the driver's errors in these.
DATABASE_DOWN = (OperationalError, InterfaceError)
# How long a client should wait before trying again: about what a PostgreSQL restart takes.
RETRY_AFTER_SECONDS = 10

API_MESSAGE = (
    "The portal's database is not answering (it may be restarting). Try again in "
    f"{RETRY_AFTER_SECONDS} seconds; a submission sent with an Idempotency-Key header is safe "
    "to send again."
)


def database_down(exc: BaseException | None) -> bool:
    """Whether an error says the database is not answering (not a bad query or a constraint)."""
    return isinstance(exc, DATABASE_DOWN)


def forget_broken_connections() -> None:
    """Close connections that broke, so that the next use opens a new one instead of failing
    again on a dead socket; a connection inside a transaction is left to its owner."""
    for conn in connections.all(initialized_only=True):
        if conn.in_atomic_block:
            continue
        with contextlib.suppress(*DATABASE_DOWN):
            conn.close()


def unavailable_response(request, exc: BaseException) -> HttpResponse:
    """503 with Retry-After: JSON under /api/, a page that needs no database elsewhere."""
    log.warning("database not answering for %s %s: %s", request.method, request.path, exc)
    forget_broken_connections()
    if request.path.startswith("/api/"):
        response = JsonResponse({"detail": API_MESSAGE, "code": "database_unavailable"}, status=503)
    else:
        # No request context: its processors read the user and their teams from the database.
        body = render_to_string("503.html", {"retry_after": RETRY_AFTER_SECONDS})
        response = HttpResponse(body, status=503)
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    response["Cache-Control"] = "no-store"
    return response


class DatabaseUnavailableMiddleware:
    """Answer 503 with Retry-After when a view fails because the database does not answer."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if database_down(exception):
            return unavailable_response(request, exception)
        return None
