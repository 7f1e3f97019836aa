"""Inventory pages: the fleet overview (everyone), the pool form and a pool's nodes (admins)."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404, redirect, render

from core.forms import add_service_errors
from fleet.forms.inventory import PoolForm
from fleet.models import NodePool
from fleet.permissions import is_platform_admin
from fleet.permissions import require_platform_admin as _require_admin
from fleet.selectors.clusters import cluster_health, cluster_list
from fleet.selectors.inventory import (
    node_free_gpus,
    node_list,
    pool_list,
    pool_list_with_stats,
    pool_stats,
)
from fleet.services.pools import pool_create, pool_update


@login_required
def overview(request):
    """Pools with live GPU figures; for admins also clusters and nodes in no pool."""
    admin = is_platform_admin(request.user)
    # Nodes before clusters: a sync that commits between the two reads then shows a cluster
    # synced beside its older nodes, never nodes beside a cluster that says it never synced.
    unpooled = list(node_list(user=request.user, unpooled=True)) if admin else []
    context = {
        "pools": pool_list_with_stats(user=request.user),
        "is_admin": admin,
        "clusters": _with_health(cluster_list(user=request.user)) if admin else [],
        "unpooled": unpooled,
    }
    return render(request, "fleet/overview.html", context)


def _with_health(clusters):
    clusters = list(clusters)
    for cluster in clusters:
        cluster.health = cluster_health(cluster=cluster)
    return clusters


@login_required
def pool_form(request, pk=None):
    """Define a node pool, or change one."""
    _require_admin(request.user)
    pool = get_object_or_404(NodePool.objects.select_related("cluster"), pk=pk) if pk else None
    form = PoolForm.for_pool(pool, request.POST or None) if pool else PoolForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = dict(form.cleaned_data)
        if data.get("tolerations") is None:
            data.pop("tolerations")
        try:
            if pool:
                data.pop("cluster")
                pool_update(actor=request.user, pool=pool, **data)
            else:
                pool = pool_create(actor=request.user, **data)
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            messages.success(request, f"Pool “{pool.name}” saved; nodes match at the next sync.")
            return redirect("fleet-overview")
    return render(request, "fleet/pool_form.html", {"form": form, "pool": pool})


@login_required
def pool_nodes(request, pk):
    """The nodes of one pool, with free GPUs per node."""
    _require_admin(request.user)
    pool = get_object_or_404(pool_list(user=request.user), pk=pk)
    nodes = list(node_list(user=request.user, pool=pool))
    for node in nodes:
        node.free = node_free_gpus(node)
    stats = pool_stats(pools=[pool])[pool.pk]
    return render(request, "fleet/pool_nodes.html", {"pool": pool, "nodes": nodes, "stats": stats})
