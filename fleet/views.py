"""Fleet pages: the overview (everyone), cluster and pool forms and node lists (admins)."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from fleet import selectors, services
from fleet.forms import ClusterForm, PoolForm, add_service_errors
from fleet.models import Cluster, NodePool
from fleet.permissions import is_platform_admin
from fleet.permissions import require_platform_admin as _require_admin


@login_required
def overview(request):
    """Pools with live GPU figures; for admins also clusters and nodes in no pool."""
    admin = is_platform_admin(request.user)
    context = {
        "pools": selectors.pool_list_with_stats(user=request.user),
        "is_admin": admin,
        "clusters": selectors.cluster_list(user=request.user) if admin else [],
        "unpooled": selectors.node_list(user=request.user, unpooled=True) if admin else [],
    }
    return render(request, "fleet/overview.html", context)


@login_required
def cluster_form(request, pk=None):
    """Register a cluster, or edit how one is reached."""
    _require_admin(request.user)
    cluster = get_object_or_404(Cluster, pk=pk) if pk else None
    if cluster:
        form = ClusterForm.for_cluster(cluster, request.POST or None)
    else:
        form = ClusterForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            if cluster:
                services.cluster_update(actor=request.user, cluster=cluster, **form.cleaned_data)
            else:
                cluster = services.cluster_register(actor=request.user, **form.cleaned_data)
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            messages.success(
                request, f"Cluster “{cluster.name}” saved; an inventory sync is queued."
            )
            return redirect("fleet-overview")
    return render(request, "fleet/cluster_form.html", {"form": form, "cluster": cluster})


@login_required
@require_POST
def cluster_sync(request, pk):
    """The 'Sync now' button: queue an inventory sync (the worker talks to the cluster)."""
    _require_admin(request.user)
    cluster = get_object_or_404(Cluster, pk=pk)
    services.cluster_sync_request(actor=request.user, cluster=cluster)
    messages.success(request, f"Inventory sync of “{cluster.name}” queued.")
    return redirect("fleet-overview")


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
                services.pool_update(actor=request.user, pool=pool, **data)
            else:
                pool = services.pool_create(actor=request.user, **data)
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
    pool = get_object_or_404(selectors.pool_list(user=request.user), pk=pk)
    nodes = list(selectors.node_list(user=request.user, pool=pool))
    for node in nodes:
        node.free = selectors.node_free_gpus(node)
    stats = selectors.pool_stats(pools=[pool])[pool.pk]
    return render(request, "fleet/pool_nodes.html", {"pool": pool, "nodes": nodes, "stats": stats})
