"""Billing API routes under /api/v1/billing/."""

from django.urls import path, re_path
from rest_framework.routers import SimpleRouter

from billing import api

router = SimpleRouter()
router.register("prices", api.GpuPriceViewSet, basename="billing-price")
router.register("budgets", api.BudgetViewSet, basename="billing-budget")

urlpatterns = [
    path("usage/", api.UsageView.as_view(), name="billing-api-usage"),
    re_path(
        r"^reports/(?P<month>[^/]+)/(?P<action>close|reopen)/$",
        api.ReportCloseView.as_view(),
        name="billing-api-report-action",
    ),
    re_path(r"^reports/(?P<month>[^/]+)/$", api.ReportView.as_view(), name="billing-api-report"),
    *router.urls,
]
