"""API routes of planning under /api/v1/: what-if runs, quota recommendations and the
auto-approval rule."""

from django.urls import path
from rest_framework.routers import SimpleRouter

from planning.api.views import recommendations, whatif

router = SimpleRouter()
router.register("whatif", whatif.WhatIfViewSet, basename="whatif")

urlpatterns = [
    path(
        "quota-auto-approval/",
        recommendations.QuotaAutoApprovalView.as_view(),
        name="api-quota-auto-approval",
    ),
    path(
        "quota-recommendations/",
        recommendations.QuotaRecommendationsView.as_view(),
        name="api-quota-recommendations",
    ),
    *router.urls,
]
