"""Sign-in protection, project-wide: who the client really is behind proxies, and what a locked-out
client is told (django-axes counts failures in the database, which every worker shares)."""

from __future__ import annotations

import math

from django.conf import settings
from django.contrib.auth import authenticate
from django.contrib.auth.forms import AuthenticationForm
from django.http import JsonResponse
from django.shortcuts import render


def client_ip(request) -> str:
    """The client's address: the socket's, or behind TRUSTED_PROXY_COUNT proxies the address
    the outermost trusted proxy saw (X-Forwarded-For entries before it are the client's word,
    and a client can write anything there)."""
    proxies = settings.TRUSTED_PROXY_COUNT
    remote = request.META.get("REMOTE_ADDR", "")
    if proxies <= 0:
        return remote
    hops = [h.strip() for h in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if h.strip()]
    return hops[-proxies] if len(hops) >= proxies else remote


def _minutes() -> int:
    return math.ceil(settings.AXES_COOLOFF_TIME.total_seconds() / 60)


def lockout_message() -> str:
    return (
        f"Too many failed sign-ins for this account from your address. Try again in "
        f"{_minutes()} minutes, or ask a platform admin to unlock it."
    )


def lockout_response(request, original_response=None, credentials=None):
    """A 429 that says what to do: JSON for the API, the login page with the reason otherwise."""
    retry_after = str(int(settings.AXES_COOLOFF_TIME.total_seconds()))
    if request.path.startswith("/api/"):
        response = JsonResponse({"detail": lockout_message()}, status=429)
    else:
        form = AuthenticationForm(request, data=request.POST or None)
        form.errors.clear()
        form.add_error(None, lockout_message())
        response = render(request, "registration/login.html", {"form": form}, status=429)
    response["Retry-After"] = retry_after
    return response


def authenticate_counted(request, *, username: str, password: str):
    """Check a username and password the way the login page does: failures count towards the
    lockout, and a locked-out client is refused even with the right password. Pass Django's
    request (DRF's wraps it in `request._request`)."""
    django_request = getattr(request, "_request", request)
    return authenticate(django_request, username=username, password=password)


def is_locked_out(request) -> bool:
    """True when the request was refused by the lockout (set by django-axes)."""
    return bool(getattr(getattr(request, "_request", request), "axes_locked_out", False))
