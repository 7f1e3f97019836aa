"""Billing pages under /billing/."""

from django.urls import path

from billing import views

urlpatterns = [
    path("", views.billing_home, name="billing-home"),
    path("reports/<str:month>/", views.report_detail, name="billing-report"),
    path("reports/<str:month>/export.<str:fmt>", views.report_export, name="billing-export"),
    path(
        "reports/<str:month>/<str:action>/",
        views.report_action,
        name="billing-report-action",
    ),
    path("teams/<slug:slug>/", views.team_billing, name="billing-team"),
    path("prices/", views.price_list, name="billing-prices"),
    path("budgets/", views.budget_list, name="billing-budgets"),
]
