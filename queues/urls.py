"""Web pages of queues: home, teams and profile, jobs under /jobs/, quotas under /quota/, and the
fleet dashboard under /dashboard/."""

from django.urls import path

from queues.views import dashboard, jobs, quotas, reservations, storage, tenancy

urlpatterns = [
    path("", tenancy.home, name="home"),
    path("departments/", tenancy.department_list, name="department-list"),
    path(
        "departments/<slug:slug>/fair-share/",
        tenancy.department_fair_share_change,
        name="department-fair-share",
    ),
    path("teams/", tenancy.team_list, name="team-list"),
    path("teams/<slug:slug>/", tenancy.team_detail, name="team-detail"),
    path("teams/<slug:slug>/hold/", tenancy.team_hold_change, name="team-hold"),
    path("teams/<slug:slug>/fair-share/", tenancy.team_fair_share_change, name="team-fair-share"),
    path(
        "teams/<slug:slug>/pod-security/",
        tenancy.team_pod_security_change,
        name="team-pod-security",
    ),  # fmt: skip
    path(
        "teams/<slug:slug>/member-fair-sharing/",
        tenancy.team_member_fair_sharing_change,
        name="team-member-fair-sharing",
    ),
    path("teams/<slug:slug>/storage/", storage.team_storage, name="team-storage"),
    path("teams/<slug:slug>/volumes/new/", storage.volume_new, name="team-volume-new"),
    path(
        "teams/<slug:slug>/volumes/<int:pk>/resize/",
        storage.volume_resize,
        name="team-volume-resize",
    ),
    path(
        "teams/<slug:slug>/volumes/<int:pk>/delete/",
        storage.volume_remove,
        name="team-volume-delete",
    ),
    path("teams/<slug:slug>/secrets/set/", storage.secret_set, name="team-secret-set"),
    path(
        "teams/<slug:slug>/secrets/<int:pk>/delete/",
        storage.secret_remove,
        name="team-secret-delete",
    ),
    path("profile/", tenancy.profile, name="profile"),
    path("profile/tokens/<int:pk>/revoke/", tenancy.token_revoke, name="token-revoke"),
    path("dashboard/", dashboard.dashboard, name="fleet-dashboard"),
    path("jobs/", jobs.job_list, name="job-list"),
    path("jobs/new/", jobs.job_create, name="job-create"),
    path("jobs/preview/", jobs.job_preview, name="job-preview"),
    path("jobs/approval-policy/", jobs.approval_policy, name="job-approval-policy"),
    path("jobs/team/<slug:slug>/", jobs.team_jobs, name="job-team-list"),
    path("jobs/team/<slug:slug>/queue/", jobs.job_queue, name="job-queue"),
    path("jobs/<int:pk>/", jobs.job_detail, name="job-detail"),
    path("jobs/<int:pk>/status/", jobs.job_status, name="job-status"),
    path("jobs/<int:pk>/log/", jobs.job_log_view, name="job-log"),
    path("jobs/<int:pk>/cancel/", jobs.job_cancel, name="job-cancel"),
    path("jobs/<int:pk>/resume/", jobs.job_resume, name="job-resume"),
    path("jobs/<int:pk>/save-template/", jobs.job_save_template, name="job-save-template"),
    path("jobs/templates/<int:pk>/delete/", jobs.job_template_remove, name="job-template-delete"),
    path("jobs/sweeps/<int:pk>/", jobs.job_sweep, name="job-sweep"),
    path("jobs/sweeps/<int:pk>/cancel/", jobs.job_sweep_cancel, name="job-sweep-cancel"),
    path("jobs/<int:pk>/approve/", jobs.job_approve, name="job-approve"),
    path("jobs/<int:pk>/reject/", jobs.job_reject, name="job-reject"),
    path("quota/", quotas.quota_overview, name="quota-overview"),
    path("quota/requests/new/", quotas.quota_request_new, name="quota-request-new"),
    path("quota/requests/figures/", quotas.quota_request_figures, name="quota-request-figures"),
    path("quota/requests/<int:pk>/", quotas.quota_request_detail, name="quota-request-detail"),
    path(
        "quota/requests/<int:pk>/cancel/",
        quotas.quota_request_cancel,
        name="quota-request-cancel",
    ),
    path("quota/decisions/", quotas.decision_queue, name="quota-decisions"),
    path("quota/audit/", quotas.audit_log, name="quota-audit"),
    path("quota/objects/", quotas.managed_objects, name="quota-objects"),
    path(
        "quota/objects/reconcile/",
        quotas.managed_objects_reconcile,
        name="quota-objects-reconcile",
    ),
    path("quota/reservations/", reservations.reservation_list, name="quota-reservations"),
    path("quota/reservations/new/", reservations.reservation_new, name="quota-reservation-new"),
    path(
        "quota/reservations/<int:pk>/",
        reservations.reservation_detail,
        name="quota-reservation-detail",
    ),
    path(
        "quota/reservations/<int:pk>/cancel/",
        reservations.reservation_cancel,
        name="quota-reservation-cancel",
    ),
    path("quota/tiers/", quotas.tier_list, name="quota-tiers"),
    path("quota/tiers/new/", quotas.tier_edit, name="quota-tier-new"),
    path("quota/tiers/<int:pk>/", quotas.tier_edit, name="quota-tier-edit"),
]
