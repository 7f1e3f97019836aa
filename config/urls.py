"""URL routes: each app's pages and its REST API under /api/v1/ (one URL module of each per
app), the portal's own routes (core: schema and docs, health, metrics), sign-in (sso: sign-out
and the identity provider's redirects) and admin."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

api_v1 = [
    path("", include("queues.api.urls")),
    path("", include("fleet.api.urls")),
    path("", include("planning.api.urls")),
    path("billing/", include("billing.api.urls")),
]

urlpatterns = [
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("", include("sso.urls")),
    path("admin/", admin.site.urls),
    path("api/v1/", include(api_v1)),
    path("", include("core.urls")),
    path("fleet/", include("fleet.urls")),
    path("billing/", include("billing.urls")),
    path("", include("planning.urls")),
    path("", include("queues.urls")),
]

handler404 = "core.views.not_found"
handler500 = "core.views.error"
