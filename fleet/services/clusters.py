"""Cluster registration and changes; an inventory sync is queued after each commit."""

from __future__ import annotations

import os

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import ProtectedError

from fleet import kube
from fleet.models import Cluster
from fleet.permissions import require_platform_admin as _require_admin

CLUSTER_FIELDS = (
    "name",
    "kubeconfig_path",
    "context",
    "in_cluster",
    "scheduler",
    "kueue_api_version",
    "is_default",
)


def _validate_connection(cluster: Cluster) -> None:
    errors = {}
    if cluster.in_cluster:
        if cluster.kubeconfig_path or cluster.context:
            errors["in_cluster"] = "In-cluster clusters take no kubeconfig path or context."
    elif not cluster.kubeconfig_path:
        errors["kubeconfig_path"] = "Give the kubeconfig path, or tick in-cluster."
    elif not os.path.isabs(cluster.kubeconfig_path):
        errors["kubeconfig_path"] = "Use an absolute path, e.g. /etc/quartermaster/kubeconfig."
    elif not os.path.isfile(cluster.kubeconfig_path):
        errors["kubeconfig_path"] = f"No file at {cluster.kubeconfig_path} on the portal server."
    elif cluster.context:
        contexts = kube.kubeconfig_contexts(cluster.kubeconfig_path)
        if cluster.context not in contexts:
            known = ", ".join(contexts) or "none found"
            errors["context"] = f"The kubeconfig has no context {cluster.context!r} ({known})."
    if errors:
        raise ValidationError(errors)


def _save_cluster(cluster: Cluster) -> Cluster:
    _validate_connection(cluster)
    # is_default is left out: the transaction below moves the default flag.
    cluster.full_clean(exclude=["last_sync_at", "last_sync_error", "is_default"])
    with transaction.atomic():
        if cluster.is_default:
            Cluster.objects.exclude(pk=cluster.pk).filter(is_default=True).update(is_default=False)
        cluster.save()
        transaction.on_commit(lambda: cluster_sync_enqueue(cluster_id=cluster.pk))
    kube.clear_client_cache()
    return cluster


def cluster_register(
    *,
    actor,
    name: str,
    kubeconfig_path: str = "",
    context: str = "",
    in_cluster: bool = False,
    scheduler: str = Cluster.Scheduler.KUEUE,
    kueue_api_version: str = Cluster.KueueApiVersion.V1BETA2,
    is_default: bool = False,
) -> Cluster:
    """Register a cluster (platform admins); an inventory sync follows after commit."""
    _require_admin(actor)
    cluster = Cluster(
        name=(name or "").strip(),
        kubeconfig_path=(kubeconfig_path or "").strip(),
        context=(context or "").strip(),
        in_cluster=bool(in_cluster),
        scheduler=scheduler,
        kueue_api_version=kueue_api_version,
        is_default=bool(is_default) or not Cluster.objects.exists(),
    )
    return _save_cluster(cluster)


def cluster_update(*, actor, cluster: Cluster, **changes) -> Cluster:
    """Change how a cluster is reached or scheduled (platform admins)."""
    _require_admin(actor)
    unknown = set(changes) - set(CLUSTER_FIELDS)
    if unknown:
        raise ValidationError(f"Unknown cluster fields: {', '.join(sorted(unknown))}.")
    for name, value in changes.items():
        setattr(cluster, name, value.strip() if isinstance(value, str) else value)
    return _save_cluster(cluster)


def cluster_delete(*, actor, cluster: Cluster) -> None:
    """Forget a cluster (platform admins); refused while pools or other records use it."""
    _require_admin(actor)
    pools = cluster.pools.count()
    if pools:
        raise ValidationError(
            f"The cluster still has {pools} node pool(s): delete or move them first."
        )
    try:
        with transaction.atomic():
            cluster.delete()
    except ProtectedError as exc:
        raise ValidationError(
            "Other records (jobs, quotas, usage) still refer to this cluster; it stays."
        ) from exc
    kube.clear_client_cache()


def cluster_sync_request(*, actor, cluster: Cluster) -> None:
    """Ask for an inventory sync now (platform admins); the worker talks to the cluster."""
    _require_admin(actor)
    transaction.on_commit(lambda: cluster_sync_enqueue(cluster_id=cluster.pk))


def cluster_sync_enqueue(*, cluster_id: int) -> None:
    """Queue the inventory sync task (call after commit)."""
    from fleet.tasks import sync_inventory

    sync_inventory.delay(cluster_id)
