"""Django app configuration of core: what every app shares, below all of them."""

from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "core"
    verbose_name = "Portal"

    def ready(self):
        # Celery worker and beat processes keep their probe files fresh (core/probes.py).
        from core import probes

        probes.connect()
