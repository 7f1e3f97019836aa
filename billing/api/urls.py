"""Billing API routes under /api/v1/billing/."""

from django.urls import path, re_path
from rest_framework.routers import SimpleRouter

from billing.api.views.budgets import BudgetViewSet
from billing.api.views.energy import CarbonSeriesUploadView, EnergySettingsView
from billing.api.views.gpufaults import GpuHealthListView, GpuHealthNodeView, GpuNodeReturnView
from billing.api.views.jobs import JobUsageView
from billing.api.views.ledger import IdleView, LedgerRateView, LedgerView
from billing.api.views.months import ReportCloseView
from billing.api.views.prices import GpuPriceViewSet
from billing.api.views.reports import ReportView
from billing.api.views.usage import UsageView

router = SimpleRouter()
router.register("prices", GpuPriceViewSet, basename="billing-price")
router.register("budgets", BudgetViewSet, basename="billing-budget")

urlpatterns = [
    path("usage/", UsageView.as_view(), name="billing-api-usage"),
    path("ledger/", LedgerView.as_view(), name="billing-api-ledger"),
    path("idle/", IdleView.as_view(), name="billing-api-idle"),
    path("ledger/rate/", LedgerRateView.as_view(), name="billing-api-ledger-rate"),
    path("energy/", EnergySettingsView.as_view(), name="billing-api-energy"),
    path(
        "energy/carbon-intensity/",
        CarbonSeriesUploadView.as_view(),
        name="billing-api-carbon-intensity",
    ),
    path("jobs/<int:pk>/usage/", JobUsageView.as_view(), name="billing-api-job-usage"),
    path("gpu-health/", GpuHealthListView.as_view(), name="billing-api-gpu-health"),
    path(
        "gpu-health/<int:cluster_id>/<str:node>/",
        GpuHealthNodeView.as_view(),
        name="billing-api-gpu-health-node",
    ),
    path(
        "gpu-health/<int:cluster_id>/<str:node>/return/",
        GpuNodeReturnView.as_view(),
        name="billing-api-gpu-node-return",
    ),
    re_path(
        r"^reports/(?P<month>[^/]+)/(?P<action>close|reopen)/$",
        ReportCloseView.as_view(),
        name="billing-api-report-action",
    ),
    re_path(r"^reports/(?P<month>[^/]+)/$", ReportView.as_view(), name="billing-api-report"),
    *router.urls,
]
