"""Job pages under /jobs/."""

from django.urls import path

from queues import job_views

urlpatterns = [
    path("", job_views.job_list, name="job-list"),
    path("new/", job_views.job_create, name="job-create"),
    path("preview/", job_views.job_preview, name="job-preview"),
    path("approval-policy/", job_views.approval_policy, name="job-approval-policy"),
    path("team/<slug:slug>/", job_views.team_jobs, name="job-team-list"),
    path("team/<slug:slug>/queue/", job_views.job_queue, name="job-queue"),
    path("<int:pk>/", job_views.job_detail, name="job-detail"),
    path("<int:pk>/status/", job_views.job_status, name="job-status"),
    path("<int:pk>/cancel/", job_views.job_cancel, name="job-cancel"),
    path("<int:pk>/approve/", job_views.job_approve, name="job-approve"),
    path("<int:pk>/reject/", job_views.job_reject, name="job-reject"),
]
