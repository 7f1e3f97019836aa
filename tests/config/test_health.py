import pytest
from django.urls import reverse


@pytest.mark.django_db
def test_healthz_reports_database_and_broker(client):
    response = client.get(reverse("healthz"))
    assert response.status_code == 200, response.content
    assert response.json() == {"status": "ok", "checks": {"database": "ok", "broker": "ok"}}


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
