"""Bench databases, built by the project's migrations (as production builds them), so that every
benchmark runs from nothing on a fresh machine."""

from __future__ import annotations

import os
from urllib.parse import urlparse, urlunparse


def _admin_url(url: str) -> tuple[str, str]:
    parsed = urlparse(url)
    return urlunparse(parsed._replace(path="/postgres")), parsed.path.lstrip("/")


def ensure_database(url: str, *, fresh: bool = False) -> None:
    """Create the database at `url` (dropped first when `fresh`). One left by an older bench
    that built tables without migrations (no django_migrations table) is made again."""
    import psycopg

    admin, name = _admin_url(url)
    with psycopg.connect(admin, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if exists and not fresh:
            with psycopg.connect(url) as db:
                tables = {r[0] for r in db.execute("SELECT tablename FROM pg_tables "
                                                   "WHERE schemaname = 'public'")}  # fmt: skip
            fresh = bool(tables) and "django_migrations" not in tables
        if exists and fresh:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        if fresh or not exists:
            conn.execute(f'CREATE DATABASE "{name}"')


def setup_django(url: str | None = None, *, fresh: bool = False) -> None:
    """Point Django at the bench database, create it if needed and migrate it."""
    if url:
        os.environ["DATABASE_URL"] = url
    ensure_database(os.environ["DATABASE_URL"], fresh=fresh)
    os.environ.setdefault("SECRET_KEY", "bench")
    os.environ.setdefault("DEBUG", "false")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
