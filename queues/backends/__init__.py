"""One backend per scheduler (queues.backends.kueue, queues.backends.volcano) behind one
interface (queues.backends.base.Backend): what a job and a cluster's quota become, how the
cluster is observed and what it says is explained, and how a job is suspended. A cluster's
backend is chosen once, from its scheduler, here."""

from __future__ import annotations

from fleet.models import Cluster
from queues.backends.base import Backend, Observed
from queues.backends.kueue import KueueBackend
from queues.backends.volcano import VolcanoBackend

__all__ = ["Backend", "Observed", "backend_for", "backend_named", "backend_of"]

_BACKENDS: dict[str, Backend] = {
    Cluster.Scheduler.KUEUE: KueueBackend(),
    Cluster.Scheduler.VOLCANO: VolcanoBackend(),
}


def backend_named(scheduler: str) -> Backend:
    """The backend of a scheduler (a Cluster.Scheduler value)."""
    return _BACKENDS[scheduler]


def backend_for(cluster: Cluster | None) -> Backend:
    """The backend of a cluster; Kueue, the default scheduler, when there is none."""
    return backend_named(cluster.scheduler if cluster is not None else Cluster.Scheduler.KUEUE)


def backend_of(*, cluster_id: int | None) -> Backend:
    """The backend of the cluster with this id, reading only its scheduler (Kueue when there
    is no such cluster)."""
    scheduler = Cluster.objects.filter(pk=cluster_id).values_list("scheduler", flat=True).first()
    return backend_named(scheduler or Cluster.Scheduler.KUEUE)
