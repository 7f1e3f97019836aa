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
