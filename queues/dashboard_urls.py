"""The fleet dashboard under /dashboard/."""

from django.urls import path

from queues import dashboard_views

urlpatterns = [path("", dashboard_views.dashboard, name="fleet-dashboard")]
