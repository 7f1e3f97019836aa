"""Reads of clusters (platform admins only)."""

from django.db.models import Count, QuerySet

from fleet.models import Cluster
from fleet.roles import is_platform_admin


def cluster_list(*, user) -> QuerySet[Cluster]:
    """Clusters (platform admins only), with node and pool counts."""
    if not is_platform_admin(user):
        return Cluster.objects.none()
    return Cluster.objects.annotate(
        node_count=Count("nodes", distinct=True), pool_count=Count("pools", distinct=True)
    ).order_by("name")
