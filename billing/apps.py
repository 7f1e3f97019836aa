"""Django app configuration of billing."""

from django.apps import AppConfig


class BillingConfig(AppConfig):
    name = "billing"
    verbose_name = "Billing"

    def ready(self):
        # Ingestion lag and gaps on web's /metrics.
        from billing.metrics import ingestion_state
        from core.metrics import register_state

        register_state("billing", ingestion_state)
