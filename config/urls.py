"""URL routes: pages per app, the REST API under /api/v1/, schema and docs, health and metrics."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView

from config import oidc
from config.metrics import metrics_view
from config.views import api_docs, healthz, healthz_workers

api_v1 = [
    path("", include("queues.api.urls")),
    path("", include("fleet.api.urls")),
    path("billing/", include("billing.api.urls")),
]

urlpatterns = [
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    # One sign-out for everyone: it also ends the identity provider's session after single
    # sign-on.
    path("accounts/logout/", oidc.SignOutView.as_view(), name="logout"),
    path("oidc/", include(oidc.urlpatterns)),
    path("admin/", admin.site.urls),
    path("api/v1/", include(api_v1)),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", api_docs, name="api-docs"),
    path("healthz", healthz, name="healthz"),
    path("healthz/workers", healthz_workers, name="healthz-workers"),
    path("metrics", metrics_view, name="metrics"),
    # Browsers and bookmarks ask for /favicon.ico whatever the page links to.
    path("favicon.ico", RedirectView.as_view(url=static("img/favicon.svg"), permanent=True)),
    path("fleet/", include("fleet.urls")),
    path("billing/", include("billing.urls")),
    path("", include("queues.urls")),
]

handler404 = "config.views.not_found"
handler500 = "config.views.error"
