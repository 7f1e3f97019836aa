"""Errors the services of every app raise and the pages and the API answer alike."""


class ClusterRefused(Exception):
    """The cluster did not take a write the user asked for; nothing was saved (the API answers
    503, core.api)."""
