"""GPU health pages (platform admins): every node's GPUs, and one node's faults, the jobs they
hit, the credits, the history, and the form that returns it to service."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render

from billing.forms.gpufaults import ReturnToServiceForm
from billing.models import GpuHealth
from billing.selectors.gpufaults import gpu_health_node, gpu_health_nodes
from billing.services.gpufaults import gpu_node_return_request
from core.forms import add_service_errors
from core.roles import is_platform_admin
from fleet.models import Cluster


@login_required
def gpu_health_page(request):
    return render(
        request, "billing/gpu_health.html", {"nodes": gpu_health_nodes(user=request.user)}
    )


@login_required
def gpu_health_node_page(request, cluster_id: int, node: str):
    if not is_platform_admin(request.user):
        raise PermissionDenied("Only platform admins see GPU health.")
    cluster = get_object_or_404(Cluster, pk=cluster_id)
    try:
        detail = gpu_health_node(user=request.user, cluster=cluster, node=node)
    except GpuHealth.DoesNotExist as exc:
        raise Http404(str(exc)) from exc
    form = ReturnToServiceForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            gpu_node_return_request(cluster=cluster, node=node, actor=request.user,
                                    reason=form.cleaned_data["reason"])  # fmt: skip
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            messages.success(request, f"Node {node} is being returned to service.")
            return redirect("billing-gpu-health-node", cluster_id=cluster.pk, node=node)
    status = 400 if request.method == "POST" and form.errors else 200
    return render(request, "billing/gpu_health_node.html", {**detail, "form": form},
                  status=status)  # fmt: skip
