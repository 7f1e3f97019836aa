from django.apps import AppConfig


class QueuesConfig(AppConfig):
    name = "queues"
    verbose_name = "Teams and queues"

    def ready(self):
        # fleet cannot import queues; it announces pool changes so their flavors re-render.
        from fleet.services.pools import pool_saved
        from queues.services.reconcile import on_pool_saved

        pool_saved.connect(on_pool_saved, dispatch_uid="queues-reconcile-on-pool-saved")
        # ... and cluster lifecycle changes, so jobs and cluster objects follow.
        from fleet.services.clusters import cluster_changed
        from queues.services.cluster_lifecycle import on_cluster_changed

        cluster_changed.connect(on_cluster_changed, dispatch_uid="queues-on-cluster-changed")
