from django.apps import AppConfig


def release_dead_claims() -> None:
    """A new worker process (after one was killed, say) takes over the jobs that a process on
    this host claimed and can no longer apply, instead of leaving them for the claim's TTL."""
    from queues.services.jobs.apply import claims_release_dead

    claims_release_dead()


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
        # ... and every change a person makes to clusters and pools, for the audit log.
        from fleet.audit import changed
        from queues.services.audit import on_fleet_changed

        changed.connect(on_fleet_changed, dispatch_uid="queues-audit-fleet-changes")
        # Each new Celery worker process, before it takes a task (the database not up yet: the
        # claims' TTL still applies).
        from core.worker import at_worker_process_start

        at_worker_process_start(
            release_dead_claims,
            failing="release dead workers' claims",
            dispatch_uid="queues-release-dead-claims",
        )
        self._connect_principal_receivers()

        # Jobs by state and team on web's /metrics.
        from core.metrics import register_state
        from queues.metrics import job_state

        register_state("jobs", job_state)

    @staticmethod
    def _connect_principal_receivers():
        """Who a user is (core.principal) is read from these: a change to any ends what the
        cache kept. Not business logic, so signals, which also see Django admin's changes."""
        from django.contrib.auth import get_user_model
        from django.contrib.auth.models import Group
        from django.db.models.signals import m2m_changed, post_delete, post_save

        from core.principal import principal_changed, user_saved
        from queues.models import Department, Membership, Team

        user_model = get_user_model()
        for model in (Membership, Team, Department, Group, user_model):
            uid = f"principal-{model._meta.label_lower}"
            post_delete.connect(principal_changed, sender=model, dispatch_uid=f"{uid}-delete")
            if model is not user_model:
                post_save.connect(principal_changed, sender=model, dispatch_uid=f"{uid}-save")
        post_save.connect(user_saved, sender=user_model, dispatch_uid="principal-user-save")
        for through in (user_model.groups.through, Department.managers.through):
            m2m_changed.connect(
                principal_changed, sender=through, dispatch_uid=f"principal-{through._meta.label}"
            )
