"""Quota pages under /quota/."""

from django.urls import path

from queues import quota_views

urlpatterns = [
    path("", quota_views.quota_overview, name="quota-overview"),
    path("requests/new/", quota_views.quota_request_new, name="quota-request-new"),
    path("requests/figures/", quota_views.quota_request_figures, name="quota-request-figures"),
    path("requests/<int:pk>/", quota_views.quota_request_detail, name="quota-request-detail"),
    path(
        "requests/<int:pk>/cancel/", quota_views.quota_request_cancel, name="quota-request-cancel"
    ),
    path("decisions/", quota_views.decision_queue, name="quota-decisions"),
    path("audit/", quota_views.audit_log, name="quota-audit"),
    path("objects/", quota_views.managed_objects, name="quota-objects"),
    path(
        "objects/reconcile/",
        quota_views.managed_objects_reconcile,
        name="quota-objects-reconcile",
    ),
    path("tiers/", quota_views.tier_list, name="quota-tiers"),
    path("tiers/new/", quota_views.tier_edit, name="quota-tier-new"),
    path("tiers/<int:pk>/", quota_views.tier_edit, name="quota-tier-edit"),
]
