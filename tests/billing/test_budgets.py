"""Budgets: alerts at thresholds (e-mail and pages), enforcement by holding the LocalQueue."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.core.exceptions import PermissionDenied
from django.urls import reverse
from django.utils import timezone

from billing.models import Budget
from billing.periods import month_start, next_month
from billing.services.budgets import budget_check, budget_set, budgets_release_past
from queues.manifests import quotas as manifests
from queues.models import AuditEvent
from queues.services import reconcile
from queues.services.holds import team_hold
from tests.queues.builders import run_tasks_eagerly

LQ_API = "kueue.x-k8s.io/v1beta2"


def _stop_policy(sc, team):
    lq = sc.kube.get(LQ_API, "LocalQueue", manifests.local_queue_name(team), team.namespace)
    return lq["spec"].get("stopPolicy")


def test_budget_alert_and_hold_through_kubesim(
    spending, mailoutbox, client, monkeypatch, django_capture_on_commit_callbacks
):
    w, sc = spending, spending["sc"]
    vision = w["vision"]
    assert _stop_policy(sc, vision) == "None"
    month = month_start(timezone.now())
    run_tasks_eagerly(monkeypatch)  # the alert goes out through the e-mail task
    with django_capture_on_commit_callbacks(execute=True):
        budget = budget_set(
            actor=w["frank"], team=vision, month=month, amount=Decimal("10.00"), enforce=True
        )
    budget.refresh_from_db()
    assert budget.held and budget.alerts_sent == [50, 80, 100]
    assert budget.last_spent == Decimal("12.00")
    vision.refresh_from_db()
    assert vision.queue_hold_reason.startswith("Budget for")
    reconcile.cluster_reconcile(cluster_id=sc.cluster.pk)
    assert _stop_policy(sc, vision) == "Hold"
    assert len(mailoutbox) == 1
    assert sorted(mailoutbox[0].to) == ["bob@example.org", "maria@example.org"]
    assert "100 %" in mailoutbox[0].subject
    assert AuditEvent.objects.filter(verb="budget.alert", team=vision).exists()
    assert AuditEvent.objects.filter(verb="team.queue_hold", team=vision).exists()
    # Shown on the team's billing page.
    client.force_login(w["alice"])
    html = client.get(reverse("billing-team", args=["vision"])).content.decode()
    assert "120.0 % of 10.00 EUR" in html and "queue is held" in html

    # A second check sends nothing new.
    with django_capture_on_commit_callbacks(execute=True):
        budget_check(budget=budget)
    assert len(mailoutbox) == 1

    # Raising the budget releases the hold.
    budget_set(actor=w["frank"], team=vision, month=month, amount=Decimal("20.00"), enforce=True)
    vision.refresh_from_db()
    assert vision.queue_hold_reason == ""
    reconcile.cluster_reconcile(cluster_id=sc.cluster.pk)
    assert _stop_policy(sc, vision) == "None"
    assert Budget.objects.get(pk=budget.pk).alerts_sent == [50]  # 60 % of the new amount


def test_hold_released_when_month_turns(spending):
    w = spending
    vision = w["vision"]
    month = month_start(timezone.now())
    budget_set(actor=w["frank"], team=vision, month=month, amount=Decimal("5.00"), enforce=True)
    vision.refresh_from_db()
    assert vision.queue_hold_reason
    turned = next_month(month)
    now = timezone.now().replace(year=turned.year, month=turned.month, day=1)
    assert budgets_release_past(now=now) == 1
    vision.refresh_from_db()
    assert vision.queue_hold_reason == ""


def test_gpu_hour_budget_without_enforcement(spending, mailoutbox):
    w = spending
    month = month_start(timezone.now())
    budget = budget_set(
        actor=w["frank"], team=w["vision"], month=month, amount=Decimal("16"),
        kind=Budget.Kind.GPU_HOURS,
    )  # fmt: skip
    budget.refresh_from_db()
    assert budget.alerts_sent == [50] and not budget.held  # 10 of 16 GPU-hours
    w["vision"].refresh_from_db()
    assert w["vision"].queue_hold_reason == ""


def test_only_finance_and_admins_set_budgets(spending):
    w = spending
    with pytest.raises(PermissionDenied):
        budget_set(
            actor=w["maria"], team=w["vision"], month=timezone.now().date(), amount=Decimal(1)
        )


def test_a_budget_never_lifts_a_hold_it_did_not_place(spending):
    w = spending
    vision = w["vision"]
    team_hold(actor=w["maria"], team=vision, reason="Security review")
    month = month_start(timezone.now())
    budget_set(actor=w["frank"], team=vision, month=month, amount=Decimal("10.00"), enforce=True)
    vision.refresh_from_db()
    assert vision.queue_hold_reason == "Held by maria: Security review"  # not overwritten
    budget_set(actor=w["frank"], team=vision, month=month, amount=Decimal("500.00"), enforce=True)
    vision.refresh_from_db()
    assert vision.queue_hold_reason == "Held by maria: Security review"  # not lifted


def test_a_budgets_spent_is_the_reports_total_to_the_cent(world, prod):
    """Lines are rounded once and added up: 14 s on each of two GPU models at 1.00/h are
    0.0039 each, so 0.00 on each line and 0.00 in all, never 0.01 on the budget."""
    from datetime import UTC, datetime
    from decimal import Decimal

    from billing.selectors.reports import finance_report, team_report
    from billing.selectors.usage import team_spend
    from tests.billing.conftest import make_price
    from tests.factories import UsageHourFactory

    cluster, a100, l4 = prod["cluster"], prod["a100"], prod["l4"]
    make_price(a100, "1.0000")
    make_price(l4, "1.0000")
    vision = world["vision"]
    hour = datetime(2026, 10, 3, 5, tzinfo=UTC)
    for model, uuid in ((a100, "GPU-a"), (l4, "GPU-l")):
        UsageHourFactory(cluster=cluster, hour=hour, gpu_uuid=uuid, pod="p", team=vision,
                         gpu_model=model, seconds=14)  # fmt: skip
    report = team_report(team=vision, month=hour.date().replace(day=1))["teams"][0]
    assert [line["cost"] for line in report["lines"]] == ["0.00", "0.00"]
    assert report["cost"] == "0.00"
    assert team_spend(team=vision, month=hour.date().replace(day=1)) == Decimal("0.00")
    # Idle capacity: each row is rounded once and the total is their sum.
    for i, uuid in enumerate(("GPU-x", "GPU-y", "GPU-z")):
        UsageHourFactory(cluster=cluster, hour=hour, gpu_uuid=uuid, pod="", gpu_model=(a100, l4,
                         a100)[i], seconds=14 + i)  # fmt: skip
    finance = finance_report(month=hour.date().replace(day=1))
    rows = sum(Decimal(r["cost"]) for r in finance["idle_capacity"])
    assert Decimal(finance["finance_totals"]["idle_cost"]) == rows
    pools = sum(Decimal(p["idle_cost"]) for p in finance["pools"])
    assert pools == rows
