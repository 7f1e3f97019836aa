"""The portal's own routes: the API schema and docs, health and metrics."""

from django.templatetags.static import static
from django.urls import path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView

from core.metrics import metrics_view
from core.views import api_docs, healthz, healthz_workers, livez, readyz

urlpatterns = [
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", api_docs, name="api-docs"),
    path("healthz", healthz, name="healthz"),
    path("healthz/workers", healthz_workers, name="healthz-workers"),
    path("livez", livez, name="livez"),
    path("readyz", readyz, name="readyz"),
    path("metrics", metrics_view, name="metrics"),
    # Browsers and bookmarks ask for /favicon.ico whatever the page links to.
    path("favicon.ico", RedirectView.as_view(url=static("img/favicon.svg"), permanent=True)),
]
