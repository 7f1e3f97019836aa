"""ASGI entry point: what `scripts/serve web` serves (config/asgi_handler.py says why this handler
and not Django's own)."""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django.setup(set_prefix=False)

from config.asgi_handler import PooledASGIHandler  # noqa: E402 (after Django's set-up)

application = PooledASGIHandler()
