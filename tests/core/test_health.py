from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from tests.factories import WorkerHeartbeatFactory


@pytest.mark.django_db
def test_healthz_reports_database_and_broker_and_the_workers_heartbeat(client):
    response = client.get(reverse("healthz"))
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "ok"
    assert body["checks"] == {"database": "ok", "broker": "ok"}
    # No worker yet: reported, but the web is healthy (no reason to restart it).
    assert body["workers"] == {"state": "no live worker", "alive": 0, "last_heartbeat": None}


@pytest.mark.django_db
def test_a_dead_worker_shows_on_healthz_workers_and_the_admins_home(client, world):
    url = reverse("healthz-workers")
    assert client.get(url).status_code == 503
    stale = timezone.now() - timedelta(minutes=10)
    WorkerHeartbeatFactory(hostname="worker-1", seen_at=stale)
    assert client.get(url).json()["state"] == "no live worker"
    client.force_login(world["admin"])
    html = client.get(reverse("home")).content.decode()
    assert "No Celery worker has sent a heartbeat since" in html
    WorkerHeartbeatFactory(hostname="worker-2", seen_at=timezone.now())
    response = client.get(url)
    assert response.status_code == 200 and response.json()["alive"] == 1
    assert "1 Celery worker alive" in client.get(reverse("home")).content.decode()


@pytest.mark.django_db
def test_healthz_is_503_when_the_broker_is_unreachable(client, settings):
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"
    response = client.get(reverse("healthz"))
    assert response.status_code == 503
    assert response.json()["checks"]["broker"].startswith("error")


@pytest.mark.django_db
def test_metrics_in_prometheus_format(client):
    from prometheus_client.parser import text_string_to_metric_families

    client.get(reverse("healthz"))
    response = client.get(reverse("metrics"))
    assert response.status_code == 200
    families = {f.name: f for f in text_string_to_metric_families(response.content.decode())}
    assert "quartermaster_http_requests" in families
    samples = families["quartermaster_http_requests"].samples
    assert any(s.labels == {"method": "GET", "status": "2xx"} and s.value >= 1 for s in samples)
