"""The fleet dashboard page."""

from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.utils import timezone

from core.roles import is_platform_admin
from fleet.models import Cluster
from fleet.selectors.clusters import cluster_health
from queues.selectors.dashboard import fleet_dashboard
from queues.selectors.reservations import reservation_timeline_rows


@login_required
def dashboard(request):
    """Pools, quota by department and team, the optimization figures and each cluster's
    health, from live data (errors only for platform admins: they may name internal hosts)."""
    context = fleet_dashboard(user=request.user)
    clusters = Cluster.objects.filter(deleted_at__isnull=True).order_by("name")
    gpus = context["cluster_gpus"]
    context["clusters"] = [(c, cluster_health(cluster=c), gpus.get(c.pk, {})) for c in clusters]
    context["show_cluster_errors"] = is_platform_admin(request.user)
    context["timeline"] = reservation_timeline_rows(user=request.user, now=timezone.now())
    return render(request, "queues/dashboard/dashboard.html", context)
