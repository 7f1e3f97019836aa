"""Django app configuration of core: what every app shares, below all of them."""

from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "core"
    verbose_name = "Portal"

    def ready(self):
        # Celery worker and beat processes keep their probe files fresh (core/probes.py).
        from core import metrics, probes

        probes.connect()
        # Tasks counted in every process; workers and beat serve theirs on METRICS_PORT.
        metrics.connect()
