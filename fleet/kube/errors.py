"""Errors from the Kubernetes API, classified once: transient (retry) or permanent (store, show)."""

from __future__ import annotations

import json


class KubeError(Exception):
    """What the Kubernetes API (or the way to it) said about a failed request."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        reason: str = "",
        causes: list[dict] | None = None,
    ):
        self.status = status
        self.reason = reason
        self.message = message
        self.causes = list(causes or [])
        super().__init__(self.describe())

    def describe(self) -> str:
        """One line a person can act on: status, reason, message, and each field cause."""
        head = " ".join(str(part) for part in (self.status, self.reason) if part)
        text = f"{head}: {self.message}" if head else self.message
        fields = [
            f"{c.get('field')}: {c.get('message', '')}"
            for c in self.causes
            if c.get("field") and c.get("field") not in self.message
        ]
        if fields:
            text += " (" + "; ".join(fields) + ")"
        return text


class TransientError(KubeError):
    """Worth retrying later: the cluster was unreachable, overloaded or raced us."""


class PermanentError(KubeError):
    """Retrying will not help: the request is wrong or not allowed."""


class ResourceExpired(TransientError):
    """A watch's resourceVersion is too old (410 Gone): list again, then watch from there."""


class ConfigurationError(PermanentError):
    """The Cluster row does not lead to a usable client configuration."""


# Status codes whose meaning does not depend on the request.
_TRANSIENT_STATUS = {408, 429, 500, 502, 503, 504}


def error_from_response(status: int, body: bytes | str | None, *, conflict_is_transient=False):
    """Build the right KubeError from an HTTP status and a (Status) body."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else (body or "")
    reason, message, causes = "", "", []
    try:
        payload = json.loads(text) if text else {}
    except ValueError:
        payload = {}
    if isinstance(payload, dict) and payload.get("kind") == "Status":
        reason = payload.get("reason") or ""
        message = payload.get("message") or ""
        causes = (payload.get("details") or {}).get("causes") or []
    if not message:
        message = text.strip()[:500] or f"HTTP {status}"
    if status == 410:
        cls = ResourceExpired
    elif status in _TRANSIENT_STATUS or status >= 500 or (status == 409 and conflict_is_transient):
        cls = TransientError
    else:
        cls = PermanentError
    return cls(message, status=status, reason=reason or _default_reason(status), causes=causes)


def _default_reason(status: int) -> str:
    return {
        400: "BadRequest",
        401: "Unauthorized",
        403: "Forbidden",
        404: "NotFound",
        409: "Conflict",
        410: "Expired",
        422: "Invalid",
        429: "TooManyRequests",
    }.get(status, "InternalError" if status >= 500 else "")
