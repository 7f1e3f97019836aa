"""Quota pages: the form's figures and errors, decisions, permissions, audit, tiers."""

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from queues.models import PriorityTier, Quota, QuotaRequest
from queues.services import quotas as quota_services
from tests.factories import AuditEventFactory
from tests.queues.builders import make_pool


def _request(quota_world, nominal=10):
    return quota_services.quota_request_create(
        actor=quota_world["bob"],
        team=quota_world["vision"],
        pool=quota_world["a100"],
        nominal_gpus=nominal,
        justification="x",
    )


def test_form_shows_quota_use_and_capacity(quota_world, client):
    client.force_login(quota_world["bob"])
    response = client.get(reverse("quota-request-new"))
    assert response.status_code == 200
    html = response.content.decode()
    # a100: 16 GPUs, nlp holds 4 → at most 12 for vision (its own 8 included): the same
    # figure as the request page's "capacity left for this team".
    assert 'data-testid="left-a100">12' in html
    assert "no price" in html  # no price book yet: shown, not a crash


def test_form_pool_table_prices_each_pool_in_fixed_queries(quota_world, client):
    from fleet.models import GpuPrice

    GpuPrice.objects.create(
        gpu_model=quota_world["a100"].gpu_model,
        price_per_hour="2.0000",
        currency="EUR",
        effective_from=timezone.now() - dt.timedelta(days=30),
    )
    client.force_login(quota_world["bob"])

    def get():
        with CaptureQueriesContext(connection) as ctx:
            response = client.get(reverse("quota-request-new"))
        assert response.status_code == 200
        return response.content.decode(), len(ctx.captured_queries)

    html, before = get()
    assert "1460.00 EUR" in html  # one GPU-month of a100: 730 h × 2 EUR
    make_pool(quota_world["cluster"], "h100", gpu="NVIDIA H100", nodes=1)
    make_pool(quota_world["cluster"], "t4", gpu="NVIDIA T4", nodes=3, gpus_per_node=4)
    html, after = get()
    assert 'data-testid="left-t4">12' in html and 'data-testid="left-a100">12' in html
    # One price lookup per GPU model is allowed; nothing per pool.
    assert after <= before + 2


def test_form_bad_input_shows_field_errors(quota_world, client):
    client.force_login(quota_world["bob"])
    team = quota_world["vision"].pk
    cases = [
        ({"nominal_gpus": "0"}, "Ask for at least 1 GPU."),
        ({"nominal_gpus": "many"}, "Enter a whole number."),
        ({"nominal_gpus": "-2"}, "Ask for at least 1 GPU."),
        ({"lending_limit": "40"}, "cannot exceed the nominal quota"),
        ({"ends_at": "2001-01-01T10:00"}, "must be in the future"),
        ({"pool": "99999"}, "Select a valid choice"),
    ]
    for changes, text in cases:
        data = {
            "team": team,
            "pool": quota_world["a100"].pk,
            "nominal_gpus": "10",
            "justification": "x",
            **changes,
        }
        response = client.post(reverse("quota-request-new"), data)
        assert response.status_code == 200, changes
        assert text in response.content.decode(), changes
    assert not QuotaRequest.objects.exists()


def test_filing_and_deciding_through_pages(quota_world, client):
    client.force_login(quota_world["bob"])
    ends = (timezone.now() + dt.timedelta(days=3)).strftime("%Y-%m-%dT%H:%M")
    response = client.post(
        reverse("quota-request-new"),
        {
            "team": quota_world["vision"].pk,
            "pool": quota_world["a100"].pk,
            "nominal_gpus": "14",
            "ends_at": ends,
            "justification": "Deadline.",
        },
    )
    request = QuotaRequest.objects.get()
    assert response.status_code == 302
    assert response.url == reverse("quota-request-detail", args=[request.pk])
    # bob cannot decide: no decision form, and a POST is refused.
    page = client.get(response.url).content.decode()
    assert "Approve</button>" not in page
    assert client.post(response.url, {"nominal_gpus": 12}).status_code == 403
    client.force_login(quota_world["maria"])
    page = client.get(reverse("quota-decisions")).content.decode()
    assert f"#{request.pk}" in page
    detail = client.get(response.url).content.decode()
    assert 'data-testid="capacity-left">12 GPUs' in detail  # 16 minus nlp's 4
    # Trimmed beyond capacity → the error says by how much.
    over = client.post(response.url, {"nominal_gpus": "13", "approve": "1"}).content.decode()
    assert "capacity by 1 GPU:" in over
    client.post(response.url, {"nominal_gpus": "11", "approve": "1"})
    request.refresh_from_db()
    assert request.state == "approved" and request.granted_nominal_gpus == 11
    assert (
        Quota.objects.get(team=quota_world["vision"], pool=quota_world["a100"]).nominal_gpus == 11
    )


def test_reject_without_reason_is_a_form_error(quota_world, client):
    request = _request(quota_world)
    client.force_login(quota_world["maria"])
    url = reverse("quota-request-detail", args=[request.pk])
    page = client.post(url, {"nominal_gpus": "10", "reject": "1"}).content.decode()
    assert "Tell the team why" in page
    client.post(url, {"nominal_gpus": "10", "reason": "Use l4.", "reject": "1"})
    request.refresh_from_db()
    assert request.state == "rejected"


def test_other_department_manager_gets_404(quota_world, client):
    request = _request(quota_world)
    client.force_login(quota_world["pablo"])
    url = reverse("quota-request-detail", args=[request.pk])
    assert client.get(url).status_code == 404
    assert client.post(url, {"nominal_gpus": "10", "approve": "1"}).status_code == 404


def test_failed_apply_is_shown(quota_world, client):
    request = _request(quota_world)
    QuotaRequest.objects.filter(pk=request.pk).update(
        state="failed", apply_error="422 Invalid: spec.resourceGroups: too many"
    )
    client.force_login(quota_world["alice"])
    page = client.get(reverse("quota-request-detail", args=[request.pk])).content.decode()
    assert "422 Invalid: spec.resourceGroups: too many" in page


def test_audit_page_is_for_managers_and_admins(quota_world, client):
    quota_services.quota_request_approve(
        quota_request=_request(quota_world), approver=quota_world["maria"]
    )
    client.force_login(quota_world["alice"])
    assert client.get(reverse("quota-audit")).status_code == 403
    client.force_login(quota_world["maria"])
    page = client.get(reverse("quota-audit")).content.decode()
    assert "quota_request.approve" in page


def test_tiers_editable_by_admins_only(quota_world, client):
    client.force_login(quota_world["maria"])
    assert client.get(reverse("quota-tiers")).status_code == 200
    assert client.get(reverse("quota-tier-new")).status_code == 403
    client.force_login(quota_world["admin"])
    response = client.post(
        reverse("quota-tier-new"), {"name": "development", "value": "10", "preemptible": "on"}
    )
    assert response.status_code == 302
    assert PriorityTier.objects.filter(name="development", value=10).exists()
    bad = client.post(reverse("quota-tier-new"), {"name": "Bad Name", "value": "x"})
    assert bad.status_code == 200 and "Enter a whole number" in bad.content.decode()


@pytest.mark.parametrize("name", ["quota-overview", "quota-decisions", "quota-audit"])
def test_page_query_counts_do_not_grow(quota_world, client, name):
    client.force_login(quota_world["maria"])
    _request(quota_world)

    def count():
        with CaptureQueriesContext(connection) as ctx:
            assert client.get(reverse(name)).status_code == 200
        return len(ctx.captured_queries)

    before = count()
    for n in range(4):
        _request(quota_world, nominal=9 + n)
    assert count() == before


def test_overview_query_count_does_not_grow_with_teams(quota_world, client):
    from queues.models import Membership

    client.force_login(quota_world["bob"])

    def get():
        with CaptureQueriesContext(connection) as ctx:
            response = client.get(reverse("quota-overview"))
        assert response.status_code == 200
        return response.content.decode(), len(ctx.captured_queries)

    _, before = get()
    Membership.objects.create(user=quota_world["bob"], team=quota_world["nlp"])
    html, after = get()
    assert quota_world["nlp"].name in html
    assert after == before


def test_decision_page_shows_the_monthly_price(quota_world, client):
    from fleet.models import GpuPrice

    GpuPrice.objects.create(
        gpu_model=quota_world["a100"].gpu_model,
        price_per_hour="2.0000",
        currency="EUR",
        effective_from=timezone.now() - dt.timedelta(days=30),
    )
    request = _request(quota_world, nominal=10)
    client.force_login(quota_world["maria"])
    page = client.get(reverse("quota-request-detail", args=[request.pk])).content.decode()
    # 10 GPUs × 730 h × 2 EUR = 14600; the change from 8 GPUs is +2920.
    assert "14600.00 EUR a month for 10 GPUs" in page
    assert "+2920.00 EUR compared with now" in page


def test_cluster_objects_page_is_for_admins(
    quota_world, client, django_capture_on_commit_callbacks
):
    from queues.services.reconcile import managed_objects_sync

    managed_objects_sync(cluster=quota_world["cluster"])
    client.force_login(quota_world["maria"])
    assert client.get(reverse("quota-objects")).status_code == 403
    client.force_login(quota_world["admin"])
    page = client.get(reverse("quota-objects")).content.decode()
    assert "qm-vision" in page and "applying" in page
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = client.post(reverse("quota-objects-reconcile"))
    assert response.status_code == 302 and len(callbacks) == 1

    def count():
        with CaptureQueriesContext(connection) as ctx:
            assert client.get(reverse("quota-objects")).status_code == 200
        return len(ctx.captured_queries)

    before = count()
    make_pool(quota_world["cluster"], "h100", gpu="NVIDIA H100", nodes=1)
    managed_objects_sync(cluster=quota_world["cluster"])
    assert count() == before


def test_figures_partial_prices_the_request(quota_world, client):
    from fleet.models import GpuPrice

    GpuPrice.objects.create(
        gpu_model=quota_world["a100"].gpu_model,
        price_per_hour="1.0000",
        currency="EUR",
        effective_from=timezone.now() - dt.timedelta(days=1),
    )
    client.force_login(quota_world["bob"])
    url = reverse("quota-request-figures")
    query = {"team": quota_world["vision"].pk, "pool": quota_world["a100"].pk, "nominal_gpus": "10"}
    page = client.get(url, query).content.decode()
    assert "7300.00 EUR a month (+1460.00 EUR compared with now)" in page
    # Another team's figures are not served to bob; junk input is no error.
    other = client.get(url, {**query, "team": quota_world["recsys"].pk}).content.decode()
    assert "Choose a pool" in other
    assert client.get(url, {"team": "x", "pool": "y", "nominal_gpus": "-1"}).status_code == 200


def test_audit_pages_keep_the_filter(quota_world, client):
    for _ in range(51):
        AuditEventFactory(team=quota_world["vision"], actor=quota_world["bob"])
    client.force_login(quota_world["admin"])
    html = client.get(reverse("quota-audit"), {"team": "vision"}).content.decode()
    import re

    older = re.search(r'href="\?([^"]*before=(\d+))" rel="next"', html)
    assert older and "team=vision&amp;" in older.group(1)
    # The older page holds the one event that did not fit, and links back to the newest.
    second = client.get(reverse("quota-audit"), {"team": "vision", "before": older.group(2)})
    assert second.content.decode().count("<tr>") == 1 + 1  # header row + one event
    assert ">Newest<" in second.content.decode()


def test_an_approved_request_says_why_the_cluster_does_not_have_it_yet(quota_world, client):
    from django.utils import timezone

    from queues.models import ManagedObject
    from queues.services import quotas as quota_services

    filed = quota_services.quota_request_create(
        actor=quota_world["bob"], team=quota_world["vision"], pool=quota_world["a100"],
        nominal_gpus=10, justification="More detectors.",
    )  # fmt: skip
    quota_services.quota_request_approve(quota_request=filed, approver=quota_world["maria"])
    ManagedObject.objects.filter(kind="ClusterQueue", name="qm-vision").update(
        last_error="Will retry: 500 InternalError: etcdserver: request timed out",
        last_error_at=timezone.now(), attempts=3,
    )  # fmt: skip
    client.force_login(quota_world["bob"])
    page = client.get(reverse("quota-request-detail", args=[filed.pk])).content.decode()
    assert "did not take the new quota yet (attempt 3 at" in page
    assert "500 InternalError: etcdserver: request timed out); retrying." in page
    client.force_login(quota_world["admin"])
    objects = client.get(reverse("quota-objects")).content.decode()
    assert "etcdserver: request timed out" in objects and "(attempt 3," in objects
