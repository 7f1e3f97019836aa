from django.apps import AppConfig


class FleetConfig(AppConfig):
    name = "fleet"
    verbose_name = "Fleet"

    def ready(self):
        # Each cluster's health and breaker on web's /metrics.
        from core.metrics import register_state
        from fleet.metrics import cluster_state

        register_state("clusters", cluster_state)
