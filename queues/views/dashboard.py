"""The fleet dashboard page."""

from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from queues.selectors.dashboard import fleet_dashboard


@login_required
def dashboard(request):
    """Pools, quota by department and team, and the optimization figures, from live data."""
    return render(request, "queues/dashboard/dashboard.html", fleet_dashboard(user=request.user))
