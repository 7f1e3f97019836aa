"""API routes for quota governance under /api/v1/."""

from rest_framework.routers import SimpleRouter

from queues import quota_api

router = SimpleRouter()
router.register("quota-requests", quota_api.QuotaRequestViewSet, basename="quotarequest")
router.register("quotas", quota_api.QuotaViewSet, basename="quota")
router.register("tiers", quota_api.PriorityTierViewSet, basename="tier")
router.register("audit-events", quota_api.AuditEventViewSet, basename="auditevent")

urlpatterns = router.urls
