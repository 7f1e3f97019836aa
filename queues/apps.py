from django.apps import AppConfig


class QueuesConfig(AppConfig):
    name = "queues"
    verbose_name = "Teams and queues"

    def ready(self):
        # fleet cannot import queues; it announces pool changes so their flavors re-render.
        from fleet.services.pools import pool_saved
        from queues.services.reconcile import on_pool_saved

        pool_saved.connect(on_pool_saved, dispatch_uid="queues-reconcile-on-pool-saved")
