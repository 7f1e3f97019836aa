"""Portal-wide endpoints: health and the API docs page."""

import logging

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.db import connection
from django.http import JsonResponse
from django.views.decorators.cache import never_cache
from django.views.defaults import page_not_found, server_error
from drf_spectacular.views import SpectacularSwaggerSplitView

from config.celery import app as celery_app

_swagger = SpectacularSwaggerSplitView.as_view(url_name="api-schema")


def api_docs(request, *args, **kwargs):
    """The interactive API docs (Swagger UI, no inline script): signed-in users, unless
    API_SCHEMA_PUBLIC is set; others are sent to sign in first."""
    if not (settings.API_SCHEMA_PUBLIC or request.user.is_authenticated):
        return redirect_to_login(request.get_full_path())
    return _swagger(request, *args, **kwargs)


logger = logging.getLogger(__name__)


def _check_database():
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()


def _check_broker():
    with celery_app.connection_for_write(url=settings.CELERY_BROKER_URL) as conn:
        conn.ensure_connection(max_retries=1, timeout=2)


@never_cache
def healthz(request):
    """200 when the database and the broker answer, 503 with the failing part otherwise."""
    checks = {}
    for name, check in (("database", _check_database), ("broker", _check_broker)):
        try:
            check()
            checks[name] = "ok"
        except Exception as exc:  # noqa: BLE001 - any failure means unhealthy
            logger.warning("healthz: %s unreachable: %s", name, exc)
            checks[name] = f"error: {exc.__class__.__name__}"
    healthy = all(v == "ok" for v in checks.values())
    return JsonResponse(
        {"status": "ok" if healthy else "unavailable", "checks": checks},
        status=200 if healthy else 503,
    )


def not_found(request, exception=None):
    """404: JSON under /api/ (clients there read JSON), the portal's page elsewhere."""
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "No such API endpoint or object."}, status=404)
    return page_not_found(request, exception)


def error(request):
    """500: JSON under /api/, the portal's page elsewhere."""
    if request.path.startswith("/api/"):
        return JsonResponse(
            {"detail": "The portal failed to answer; it has been logged."}, status=500
        )
    return server_error(request)
