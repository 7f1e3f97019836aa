"""Whether a worker may talk to a cluster now, shared by every worker process through the
Cluster row that fleet.kube.health writes: a cluster that did not answer lately is left alone
until its next try, and then only one worker tries (the others would each wait a timeout)."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from fleet import kube
from fleet.models import Cluster

# How long the other workers wait for the one that tries an unreachable cluster again: longer
# than the probe's timeouts, so that its answer (or its failure) is recorded before.
PROBE_HOLD = timedelta(seconds=sum(kube.PROBE_TIMEOUT) + 5)


def cluster_may_call(*, cluster: Cluster, now=None) -> bool:
    """True when this worker should talk to the cluster now: it is enabled and answering, or
    it is unreachable, its next try is due, this worker won it and a probe (GET /version, short
    timeouts) found it answering again."""
    if not cluster.enabled or cluster.deleted_at:
        return False
    if cluster.unreachable_since is None:
        return True
    now = now or timezone.now()
    if cluster.retry_at and cluster.retry_at > now:
        return False
    won = Cluster.objects.filter(pk=cluster.pk, retry_at=cluster.retry_at).update(
        retry_at=now + PROBE_HOLD
    )
    if not won:
        return False
    client = kube.client_for(cluster)
    client.health.allow_probe()
    return client.probe()
