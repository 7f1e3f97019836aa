"""Cluster pages (platform admins): register or edit a cluster, sync it now."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from core.forms import add_service_errors
from fleet.forms.clusters import ClusterForm
from fleet.models import Cluster
from fleet.permissions import require_platform_admin as _require_admin
from fleet.selectors.clusters import cluster_health
from fleet.services.clusters import (
    ACTIVE_JOB_STATES,
    cluster_delete,
    cluster_disable,
    cluster_enable,
    cluster_register,
    cluster_sync_request,
    cluster_update,
)


@login_required
def cluster_form(request, pk=None):
    """Register a cluster, or edit how one is reached."""
    _require_admin(request.user)
    cluster = get_object_or_404(Cluster, pk=pk, deleted_at__isnull=True) if pk else None
    if cluster:
        form = ClusterForm.for_cluster(cluster, request.POST or None)
    else:
        form = ClusterForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            if cluster:
                cluster_update(actor=request.user, cluster=cluster, **form.cleaned_data)
            else:
                cluster = cluster_register(actor=request.user, **form.cleaned_data)
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            messages.success(
                request, f"Cluster “{cluster.name}” saved; an inventory sync is queued."
            )
            return redirect("fleet-overview")
    context = {"form": form, "cluster": cluster}
    if cluster:
        context["health"] = cluster_health(cluster=cluster)
        context["active_jobs"] = cluster.jobs.filter(state__in=ACTIVE_JOB_STATES).count()
    return render(request, "fleet/cluster_form.html", context)


def _lifecycle(request, pk, change):
    _require_admin(request.user)
    cluster = get_object_or_404(Cluster, pk=pk, deleted_at__isnull=True)
    try:
        done = change(cluster)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
        return redirect("fleet-cluster-edit", pk=pk)
    messages.success(request, done)
    if cluster.deleted_at:
        return redirect("fleet-overview")
    return redirect("fleet-cluster-edit", pk=pk)


@login_required
@require_POST
def cluster_disable_view(request, pk):
    """Disable a cluster (with a reason shown to the people whose jobs wait)."""

    def change(cluster):
        cluster_disable(actor=request.user, cluster=cluster, reason=request.POST.get("reason", ""))
        return f"Cluster “{cluster.name}” disabled: nothing more is sent to it."

    return _lifecycle(request, pk, change)


@login_required
@require_POST
def cluster_enable_view(request, pk):
    def change(cluster):
        cluster_enable(actor=request.user, cluster=cluster, reason=request.POST.get("reason", ""))
        return f"Cluster “{cluster.name}” enabled: what waited for it is being sent."

    return _lifecycle(request, pk, change)


@login_required
@require_POST
def cluster_delete_view(request, pk):
    def change(cluster):
        cluster_delete(actor=request.user, cluster=cluster, force=bool(request.POST.get("force")))
        return f"Cluster “{cluster.name}” deleted; its objects are being removed from it."

    return _lifecycle(request, pk, change)


@login_required
@require_POST
def cluster_sync(request, pk):
    """The 'Sync now' button: queue an inventory sync (the worker talks to the cluster)."""
    _require_admin(request.user)
    cluster = get_object_or_404(Cluster, pk=pk)
    cluster_sync_request(actor=request.user, cluster=cluster)
    messages.success(request, f"Inventory sync of “{cluster.name}” queued.")
    return redirect("fleet-overview")
