"""API routes of queues under /api/v1/: tenancy, quotas and jobs."""

from django.urls import path
from rest_framework.routers import DefaultRouter

from queues.api.views import jobs, quotas, reservations, storage, tenancy


class Router(DefaultRouter):
    """The API root, and no format suffixes (`/jobs/1.json`): ?format= chooses a format, and
    an id is an id (a suffix route read `/volumes/1.5/` as volume 1 in format "5")."""

    include_format_suffixes = False


router = Router()
router.register("departments", tenancy.DepartmentViewSet, basename="department")
router.register("teams", tenancy.TeamViewSet, basename="team")
router.register("memberships", tenancy.MembershipViewSet, basename="membership")
router.register("tokens", tenancy.ApiTokenViewSet, basename="apitoken")
router.register("quota-requests", quotas.QuotaRequestViewSet, basename="quotarequest")
router.register("quotas", quotas.QuotaViewSet, basename="quota")
router.register("reservations", reservations.ReservationViewSet, basename="reservation")
router.register("tiers", quotas.PriorityTierViewSet, basename="tier")
router.register("audit-events", quotas.AuditEventViewSet, basename="auditevent")
router.register("jobs", jobs.JobViewSet, basename="api-job")
router.register("job-templates", jobs.JobTemplateViewSet, basename="jobtemplate")
router.register("sweeps", jobs.SweepViewSet, basename="sweep")
router.register("volumes", storage.VolumeViewSet, basename="volume")
router.register("secrets", storage.SecretViewSet, basename="secret")

urlpatterns = [
    path("me/", tenancy.MeView.as_view(), name="api-me"),
    path("auth/token/", tenancy.TokenObtainView.as_view(), name="api-token-obtain"),
    path("approval-policy/", jobs.ApprovalPolicyView.as_view(), name="api-approval-policy"),
    path(
        "reservation-settings/",
        reservations.ReservationSettingsView.as_view(),
        name="api-reservation-settings",
    ),
    *router.urls,
]
