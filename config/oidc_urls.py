"""URL helpers for single sign-on that settings can import (no Django imports)."""

from urllib.parse import urlsplit


def origin(url: str) -> str:
    """scheme://host[:port] of a URL, as a Content-Security-Policy source."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"
