"""Portal-wide endpoints: health and the API docs page."""

import logging
import sys

from celery import current_app
from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.db import connection
from django.http import JsonResponse
from django.views.decorators.cache import never_cache
from django.views.defaults import page_not_found, server_error
from drf_spectacular.views import SpectacularSwaggerSplitView

from core.outage import database_down, forget_broken_connections, unavailable_response
from core.selectors import worker_status

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
    with current_app.connection_for_write(url=settings.CELERY_BROKER_URL) as conn:
        conn.ensure_connection(max_retries=1, timeout=2)


def _workers() -> dict:
    status = worker_status()
    last = status["last_seen"]
    return {
        "state": "ok" if status["ok"] else "no live worker",
        "alive": len(status["alive"]),
        "last_heartbeat": last.isoformat() if last else None,
    }


@never_cache
def healthz_workers(request):
    """200 while some Celery worker has sent a heartbeat lately, 503 otherwise: for monitoring
    and alerts (not a web liveness probe: a dead worker is no reason to restart the web)."""
    try:
        workers = _workers()
    except Exception as exc:  # noqa: BLE001 - the database is down: say so
        logger.warning("healthz: workers unknown: %s", exc)
        forget_broken_connections()
        body = {"state": "unknown", "error": exc.__class__.__name__}
        if database_down(exc):
            body["detail"] = (
                "The database is not answering, so the workers' heartbeats cannot be read."
            )
        return JsonResponse(body, status=503)
    return JsonResponse(workers, status=200 if workers["state"] == "ok" else 503)


@never_cache
def healthz(request):
    """200 when the database and the broker answer, 503 with the failing part otherwise. The
    workers' heartbeat is reported too, without failing the check (see healthz_workers)."""
    checks, details = {}, {}
    for name, check in (("database", _check_database), ("broker", _check_broker)):
        try:
            check()
            checks[name] = "ok"
        except Exception as exc:  # noqa: BLE001 - any failure means unhealthy
            logger.warning("healthz: %s unreachable: %s", name, exc)
            checks[name] = f"error: {exc.__class__.__name__}"
            # Not the error's text: it names hosts and ports, and anyone may ask /healthz.
            details[name] = f"The {name} is not answering ({exc.__class__.__name__})."
            if name == "database":
                forget_broken_connections()
    healthy = all(v == "ok" for v in checks.values())
    payload = {"status": "ok" if healthy else "unavailable", "checks": checks}
    if details:
        payload["details"] = details
    if checks["database"] == "ok":
        payload["workers"] = _workers()
    return JsonResponse(payload, status=200 if healthy else 503)


def not_found(request, exception=None):
    """404: JSON under /api/ (clients there read JSON), the portal's page elsewhere."""
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "No such API endpoint or object."}, status=404)
    return page_not_found(request, exception)


def error(request):
    """500: JSON under /api/, the portal's page elsewhere; 503 with Retry-After when what
    failed is the database not answering (raised outside a view, where the middleware of
    core.outage does not see it; Django calls this inside its except block)."""
    exc = sys.exc_info()[1]
    if database_down(exc):
        return unavailable_response(request, exc)
    if request.path.startswith("/api/"):
        return JsonResponse(
            {"detail": "The portal failed to answer; it has been logged."}, status=500
        )
    return server_error(request)
