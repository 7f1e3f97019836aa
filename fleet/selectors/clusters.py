"""Reads of clusters (platform admins only)."""

from django.db.models import Count, QuerySet
from django.utils import timezone

from core.roles import is_platform_admin
from fleet.models import Cluster


def cluster_list(*, user) -> QuerySet[Cluster]:
    """Clusters (platform admins only), with node and pool counts."""
    if not is_platform_admin(user):
        return Cluster.objects.none()
    return (
        Cluster.objects.filter(deleted_at__isnull=True)
        .annotate(
            node_count=Count("nodes", distinct=True), pool_count=Count("pools", distinct=True)
        )
        .order_by("name")
    )


def cluster_wait_reason(*, cluster: Cluster, waiting: str = "your job") -> str:
    """Why work for the cluster waits now (disabled, or not answering), or "" when it does not.
    The text is shown to people whose jobs or quota wait for the cluster."""
    if not cluster.enabled:
        why = f" ({cluster.disabled_reason})" if cluster.disabled_reason else ""
        return (
            f"Cluster {cluster.name} is disabled by the platform admins{why}; "
            f"{waiting} is sent to it when it is enabled again."
        )
    if cluster.unreachable_since:
        since = timezone.localtime(cluster.unreachable_since)
        retry = timezone.localtime(cluster.retry_at) if cluster.retry_at else None
        next_try = f", next try at {retry:%H:%M:%S}" if retry else ""
        return (
            f"Cluster {cluster.name} has not answered since {since:%H:%M} {since:%Z}"
            f"{next_try}; {waiting} is applied when it answers."
        )
    return ""


def cluster_health(*, cluster: Cluster) -> dict:
    """What the clusters page and the dashboard show: state, last contact, latency, error."""
    if not cluster.enabled:
        state, label = "disabled", "disabled"
    elif cluster.unreachable_since:
        state, label = "unreachable", "unreachable"
    elif cluster.last_contact_at is None:
        state, label = "unknown", "not contacted yet"
    else:
        state, label = "ok", "reachable"
    return {
        "state": state,
        "label": label,
        "last_contact_at": cluster.last_contact_at,
        "api_latency_ms": cluster.api_latency_ms,
        "unreachable_since": cluster.unreachable_since,
        # A disabled cluster is not tried at all: no next try to announce.
        "retry_at": cluster.retry_at if cluster.enabled else None,
        "last_error": cluster.last_error,
        "last_error_at": cluster.last_error_at,
        "wait_reason": cluster_wait_reason(cluster=cluster),
    }
