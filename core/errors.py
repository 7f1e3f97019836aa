"""Errors the services of every app raise and the pages and the API answer alike."""


class IdempotencyKeyReused(Exception):
    """An Idempotency-Key sent again with a different request: the earlier answer is not this
    request's, and making a second one would break the key's promise (the API answers 422)."""


class ClusterRefused(Exception):
    """The cluster did not take a write the user asked for; nothing was saved (the API answers
    503, core.api)."""
