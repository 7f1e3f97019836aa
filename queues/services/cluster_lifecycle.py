"""What queues does when a platform admin enables, disables or deletes a cluster (fleet announces
it with `cluster_changed`; fleet cannot import queues): send what waited, tell the jobs that wait
why, and on delete cancel the cluster's jobs (when forced) and remove the objects the portal
keeps there."""

from __future__ import annotations

import logging

from django.contrib.auth import get_user_model
from django.db import transaction

from fleet import kube
from fleet.models import Cluster
from fleet.selectors.clusters import cluster_wait_reason
from fleet.services.clusters import ACTIVE_JOB_STATES, cluster_forget
from queues.models import Job, ManagedObject
from queues.services.jobs.apply import jobs_apply_request, jobs_delete_pending, jobs_tell_waiting
from queues.services.jobs.lifecycle import TransitionError, job_transition
from queues.services.reconcile import _sort_key

log = logging.getLogger(__name__)


def on_cluster_changed(sender, cluster_id: int, change: str, **extra) -> None:
    """fleet's cluster_changed signal (sent after commit)."""
    from queues.tasks import delete_job, reconcile_cluster, remove_cluster_objects

    cluster = Cluster.objects.filter(pk=cluster_id).first()
    if cluster is None:
        return
    actor = get_user_model().objects.filter(pk=extra.get("actor_id")).first()
    if change == "enabled":
        reconcile_cluster.delay(cluster_id)
        jobs_apply_request(cluster_id=cluster_id)
        # What was cancelled while it was disabled is deleted there now.
        for job_id in jobs_delete_pending(cluster_id=cluster_id):
            delete_job.delay(job_id)
    elif change == "disabled":
        jobs_tell_waiting(cluster=cluster, reason=cluster_wait_reason(cluster=cluster))
    elif change == "deleted":
        if extra.get("force"):
            cluster_jobs_cancel(cluster=cluster, actor=actor)
        remove_cluster_objects.delay(cluster_id)


def cluster_jobs_cancel(*, cluster: Cluster, actor) -> int:
    """Cancel every active job of a cluster being deleted; returns how many."""
    who = actor.get_username() if actor else "a platform admin"
    cancelled = 0
    for job_id in Job.objects.filter(cluster=cluster, state__in=ACTIVE_JOB_STATES).values_list(
        "pk", flat=True
    ):
        try:
            job_transition(
                job_id=job_id,
                to_state=Job.State.CANCELLED,
                reason=f"Cancelled: cluster {cluster.name} was deleted by {who}.",
                fields={"pending_reason": "", "queue_position": None, "estimated_start": None},
            )
            cancelled += 1
        except TransitionError:  # it ended meanwhile
            continue
    return cancelled


def cluster_objects_remove(*, cluster_id: int, reachable: bool = True) -> dict:
    """Delete what the portal keeps in a deleted cluster (dependents first, namespaces last,
    which takes the jobs in them), forget the rows, and the cluster itself when nothing of the
    past refers to it. With reachable=False (the cluster never answered) the objects are left
    there and only forgotten. Transient errors propagate (the task retries)."""
    cluster = Cluster.objects.filter(pk=cluster_id, deleted_at__isnull=False).first()
    if cluster is None:
        return {}
    rows = sorted(ManagedObject.objects.filter(cluster=cluster), key=_sort_key)[::-1]
    removed = 0
    if reachable and rows:
        try:
            client = kube.client_for(cluster)
        except kube.ConfigurationError as exc:  # no way to reach it: the objects stay there
            log.warning("cluster %s cannot be reached to remove its objects: %s", cluster, exc)
            reachable = False
    if reachable and rows:
        for row in rows:
            if client.delete(row.api_version, row.kind, row.name, row.namespace or None):
                removed += 1
    with transaction.atomic():
        ManagedObject.objects.filter(cluster=cluster).delete()
    forgotten = cluster_forget(cluster_id=cluster_id)
    log.info("cluster %s deleted: %d objects removed, row %s", cluster, removed,
             "removed" if forgotten else "kept for history")  # fmt: skip
    return {"removed": removed, "left": 0 if reachable else len(rows), "row_removed": forgotten}


def cluster_objects_remove_gave_up(exc, attempt: int, next_at, cluster_id: int) -> None:
    """on_retry of the removal task: when the cluster never answered, forget its objects."""
    if next_at is None:
        cluster_objects_remove(cluster_id=cluster_id, reachable=False)
