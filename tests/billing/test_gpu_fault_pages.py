"""GPU health pages and API (platform admins only), returning a node to service through them,
and the fault credit in the month's report and its exports (issue #35)."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.urls import reverse

from billing.exports import report_csv, report_focus_csv
from billing.models import GpuFault, GpuFaultCredit, GpuHealth, GpuHealthEvent
from billing.selectors.reports import build_report
from fleet.models import Cluster
from queues.models import AuditEvent
from tests.billing.conftest import make_job

AT = datetime(2026, 10, 12, 9, 30, tzinfo=UTC)


def make_fault(world, *, node="a100-node-1", cluster=None, seconds=7200, amount="6.00"):
    """A contained fault on GPU 3 of a node that stopped alice's job, credited 2 GPU-hours."""
    cluster = cluster or Cluster.objects.create(name="prod", kubeconfig_path="/dev/null")
    for index in range(4):
        failed = index == 3
        GpuHealth.objects.create(
            cluster=cluster, node_name=node, gpu_uuid=f"GPU-{node}-{index}", gpu_index=index,
            state="failed" if failed else "healthy", reason="XID 79 reported by the driver"
            if failed else "", last_xid=79 if failed else 0, observed_at=AT, state_since=AT,
        )  # fmt: skip
    GpuHealthEvent.objects.create(cluster=cluster, node_name=node, gpu_uuid=f"GPU-{node}-3",
                                  gpu_index=3, at=AT, state="failed",
                                  reason="XID 79 reported by the driver")  # fmt: skip
    fault = GpuFault.objects.create(
        cluster=cluster, node_name=node, gpu_uuid=f"GPU-{node}-3", gpu_index=3, xid=79,
        reason="XID 79 reported by the driver", detected_at=AT, state="contained",
        tainted_at=AT, contained_at=AT,
    )  # fmt: skip
    job = make_job(world["vision"], world["alice"], name="faulted-train", state="failed")
    GpuFaultCredit.objects.create(
        fault=fault, job=job, team=job.team, gpu_seconds_lost=seconds,
        price_per_hour=Decimal("3.0000"), amount=Decimal(amount), stopped_at=AT,
    )  # fmt: skip
    return fault


@pytest.mark.parametrize("who", ["alice", "bob", "maria", "frank"])
def test_only_platform_admins_see_gpu_health(world, api_as, client, who):
    fault = make_fault(world)
    node_url = reverse("billing-api-gpu-health-node", args=[fault.cluster_id, fault.node_name])
    api = api_as(world[who])
    assert api.get(reverse("billing-api-gpu-health")).status_code == 403
    assert api.get(node_url).status_code == 403
    back = reverse("billing-api-gpu-node-return", args=[fault.cluster_id, fault.node_name])
    assert api.post(back, {"reason": "fixed"}, format="json").status_code == 403
    client.force_login(world[who])
    assert client.get(reverse("billing-gpu-health")).status_code == 403
    page = reverse("billing-gpu-health-node", args=[fault.cluster_id, fault.node_name])
    assert client.get(page).status_code == 403
    assert client.post(page, {"reason": "fixed"}).status_code == 403
    fault.refresh_from_db()
    assert fault.state == "contained"


def test_anonymous_callers_are_refused(world, api, client):
    fault = make_fault(world)
    assert api.get(reverse("billing-api-gpu-health")).status_code in (401, 403)
    page = reverse("billing-gpu-health-node", args=[fault.cluster_id, fault.node_name])
    assert client.get(page).status_code == 302  # to the login page


def test_an_admin_reads_health_per_node_with_history(world, api_as, django_assert_max_num_queries):
    fault = make_fault(world)
    cluster = fault.cluster
    for n in range(5):  # more nodes must not cost more queries
        GpuHealth.objects.create(cluster=cluster, node_name=f"l4-node-{n}", gpu_uuid=f"GPU-l4-{n}",
                                 observed_at=AT, state_since=AT)  # fmt: skip
    api = api_as(world["admin"])
    with django_assert_max_num_queries(8):
        nodes = api.get(reverse("billing-api-gpu-health")).json()
    by = {n["node"]: n for n in nodes}
    assert len(nodes) == 6
    assert by["a100-node-1"]["state"] == "failed" and by["a100-node-1"]["open_faults"] == 1
    assert [g["state"] for g in by["a100-node-1"]["gpus"]] == ["healthy"] * 3 + ["failed"]
    detail = api.get(
        reverse("billing-api-gpu-health-node", args=[cluster.pk, "a100-node-1"])
    ).json()
    assert detail["faults"][0]["xid"] == 79
    assert detail["faults"][0]["credits"][0]["amount"] == "6.00"
    assert detail["history"][0]["state"] == "failed"
    missing = reverse("billing-api-gpu-health-node", args=[cluster.pk, "no-such-node"])
    assert api.get(missing).status_code == 404


def test_the_health_page_costs_the_same_queries_for_more_nodes(
    world, client, django_assert_max_num_queries
):
    fault = make_fault(world)
    client.force_login(world["admin"])
    client.get(reverse("billing-gpu-health"))  # the session and the user: cached after this
    for n in range(2):  # two more nodes with faults, six healthy ones
        make_fault(world, node=f"h100-node-{n}", cluster=fault.cluster)
    for n in range(2, 8):
        GpuHealth.objects.create(cluster=fault.cluster, node_name=f"h100-node-{n}",
                                 gpu_uuid=f"GPU-h-{n}", observed_at=AT, state_since=AT)  # fmt: skip
    with django_assert_max_num_queries(12):
        page = client.get(reverse("billing-gpu-health"))
    assert page.content.decode().count("data-node=") == 9


def test_returning_a_node_takes_a_reason_and_is_audited(world, api_as, monkeypatch):
    monkeypatch.setattr("billing.services.gpufaults.returns._enqueue_return", lambda: None)
    fault = make_fault(world)
    api = api_as(world["admin"])
    url = reverse("billing-api-gpu-node-return", args=[fault.cluster_id, fault.node_name])
    bad = api.post(url, {"reason": "  "}, format="json")
    assert bad.status_code == 400 and "reason" in bad.json()
    assert api.post(url, {}, format="json").status_code == 400
    ok = api.post(url, {"reason": "GPU 3 replaced"}, format="json")
    assert ok.status_code == 202 and ok.json()["faults_returning"] == 1
    fault.refresh_from_db()
    assert fault.state == "returning" and fault.return_requested_by == world["admin"]
    event = AuditEvent.objects.get(verb="node.return_to_service")
    assert event.actor == world["admin"] and event.message == "GPU 3 replaced"
    # Nothing left to return: a clean 400, not a 500.
    again = api.post(url, {"reason": "twice"}, format="json")
    assert again.status_code == 400 and "node" in again.json()


def test_the_node_page_shows_faults_and_returns_the_node(world, client, monkeypatch):
    monkeypatch.setattr("billing.services.gpufaults.returns._enqueue_return", lambda: None)
    fault = make_fault(world)
    client.force_login(world["admin"])
    page = reverse("billing-gpu-health-node", args=[fault.cluster_id, fault.node_name])
    html = client.get(page).content.decode()
    assert "XID 79 reported by the driver" in html and "faulted-train" in html
    assert client.post(page, {"reason": ""}).status_code == 400
    assert client.post(page, {"reason": "burn-in passed"}).status_code == 302
    fault.refresh_from_db()
    assert fault.state == "returning"
    listing = client.get(reverse("billing-gpu-health")).content.decode()
    assert 'data-node="a100-node-1" data-state="failed"' in listing


def test_the_months_report_and_exports_carry_the_credit(world):
    make_fault(world, seconds=7200, amount="6.00")
    report = build_report(month=AT.date().replace(day=1))
    vision = next(t for t in report["teams"] if t["team"] == "vision")
    credits = vision["gpu_fault_credits"]
    assert credits["gpu_hours"] == "2.0000" and credits["credit"] == "6.00"
    line = credits["lines"][0]
    assert (line["cluster_node"], line["gpu_index"], line["amount"]) == ("a100-node-1", 3, "6.00")
    assert Decimal(vision["amount_due"]) == Decimal(vision["cost"]) - Decimal("6.00")
    assert report["totals"]["gpu_fault_credits"] == "6.00"

    rows = list(csv.DictReader(io.StringIO(report_csv(report))))
    credit_rows = [r for r in rows if r["gpu_model"].startswith("credit: GPU fault")]
    assert len(credit_rows) == 1 and credit_rows[0]["cost"] == "-6.00"
    assert f"#{line['fault_id']}" in credit_rows[0]["gpu_model"]
    total = rows[-1]
    assert total["team"] == "TOTAL"
    assert Decimal(total["cost"]) == sum(Decimal(r["cost"]) for r in rows[:-1])

    focus = list(csv.DictReader(io.StringIO(report_focus_csv(report))))
    [credit] = [r for r in focus if r["ServiceName"] == "GPU fault credit"]
    assert credit["ChargeCategory"] == "Credit" and credit["BilledCost"] == "-6.00"
    tags = json.loads(credit["Tags"])
    assert tags["gpu_fault"] == line["fault_id"] and tags["job"] == line["job_id"]

    # Another month carries none of it.
    later = build_report(month=(AT + timedelta(days=31)).date().replace(day=1))
    assert all(not t.get("gpu_fault_credits") for t in later["teams"])


def test_a_team_sees_its_credit_only(world, client):
    make_fault(world)
    month = f"{AT:%Y-%m}"
    client.force_login(world["alice"])
    html = client.get(reverse("billing-report", args=[month])).content.decode()
    assert 'data-testid="gpu-fault-credits"' in html and "− 6.00" in html
    client.force_login(world["carol"])  # nlp: not hers
    html = client.get(reverse("billing-report", args=[month])).content.decode()
    assert 'data-testid="gpu-fault-credits"' not in html
