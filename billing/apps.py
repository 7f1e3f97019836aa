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
        # queues cannot import billing: its reservation pages ask the price of held capacity
        # by the team's policy through this signal.
        from billing.selectors.reservations import on_reservation_priced
        from queues.selectors.reservations import reservation_priced

        reservation_priced.connect(on_reservation_priced, dispatch_uid="billing-reservation-priced")
