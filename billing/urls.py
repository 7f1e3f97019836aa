"""Billing pages under /billing/."""

from django.urls import path

from billing.views import budgets, energy, gpufaults, idle, jobs, ledger, months, prices, reports

urlpatterns = [
    path("", reports.billing_home, name="billing-home"),
    path("reports/<str:month>/", reports.report_detail, name="billing-report"),
    path("reports/<str:month>/export.<str:fmt>", reports.report_export, name="billing-export"),
    path("reports/<str:month>/<str:action>/", months.report_action, name="billing-report-action"),
    path("teams/<slug:slug>/", reports.team_billing, name="billing-team"),
    path("jobs/<int:pk>/usage/", jobs.job_usage_panel, name="billing-job-usage"),
    path("prices/", prices.price_list_page, name="billing-prices"),
    path("budgets/", budgets.budget_list_page, name="billing-budgets"),
    path("ledger/", ledger.ledger_page, name="billing-ledger"),
    path("idle/", idle.idle_page, name="billing-idle"),
    path("energy/", energy.energy_settings_page, name="billing-energy"),
    path("gpu-health/", gpufaults.gpu_health_page, name="billing-gpu-health"),
    path(
        "gpu-health/<int:cluster_id>/<str:node>/",
        gpufaults.gpu_health_node_page,
        name="billing-gpu-health-node",
    ),
]
