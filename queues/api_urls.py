from django.urls import path
from rest_framework.routers import DefaultRouter

from queues import api

router = DefaultRouter()
router.register("departments", api.DepartmentViewSet, basename="department")
router.register("teams", api.TeamViewSet, basename="team")
router.register("memberships", api.MembershipViewSet, basename="membership")
router.register("tokens", api.ApiTokenViewSet, basename="apitoken")

urlpatterns = [
    path("me/", api.MeView.as_view(), name="api-me"),
    path("auth/token/", api.TokenObtainView.as_view(), name="api-token-obtain"),
    *router.urls,
]
