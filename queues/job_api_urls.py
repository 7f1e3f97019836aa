"""API routes for jobs under /api/v1/."""

from django.urls import path
from rest_framework.routers import SimpleRouter

from queues import job_api

router = SimpleRouter()
router.register("jobs", job_api.JobViewSet, basename="api-job")

urlpatterns = [
    path("approval-policy/", job_api.ApprovalPolicyView.as_view(), name="api-approval-policy"),
    *router.urls,
]
