"""Evidence-based quota: recommendations from a team's measured use, borrowing and idle share,
and the admins' rule that approves an increase when the evidence and the pool support it,
audited with the figures that decided it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from billing.dcgm import hour_start
from billing.models import LedgerHour, UsageHour
from planning.models import QuotaAutoApproval
from planning.selectors.evidence import quota_evidence
from queues.models import AuditEvent, PriorityTier, QuotaRequest
from queues.services.quotas import quota_request_create
from tests.billing.conftest import make_job

NOW = timezone.now()


def _held(world, team, pool, gpus, hours, util=60.0):
    """The team held `gpus` GPUs of the pool in each of the last `hours` hours."""
    job = make_job(team, world["alice"], name=f"{team.slug}-{pool.name}", pod=f"{team.slug}-0")
    top = hour_start(NOW)
    UsageHour.objects.bulk_create(
        UsageHour(
            hour=top - timedelta(hours=h),
            cluster=pool.cluster,
            gpu_uuid=f"GPU-{team.slug}-{g}",
            pod=f"{team.slug}-0",
            namespace=team.namespace,
            team=team,
            job=job,
            pool=pool,
            seconds_allocated=3600,
            util_mean=util,
            sample_count=120,
            expected_samples=120,
        )  # fmt: skip
        for h in range(hours)
        for g in range(gpus)
    )


def test_quota_unused_at_p90_borrowing_and_idleness_are_recommended_on(quota_world):
    w = quota_world
    _held(w, w["vision"], w["a100"], 2, 700)  # quota 8, holds 2 nearly all the time
    _held(w, w["nlp"], w["a100"], 4, 720)  # quota 4, all of it, and borrows 2 a third of the time
    top = hour_start(NOW)
    LedgerHour.objects.bulk_create(
        LedgerHour(
            hour=top - timedelta(hours=h),
            cluster=w["cluster"],
            pool=w["a100"],
            team=w["nlp"],
            borrowed_seconds=2 * 3600,
            samples=60,
        )  # fmt: skip
        for h in range(240)
    )
    rows = {(r["team"].slug, r["pool"].name): r for r in quota_evidence(
        teams=[w["vision"], w["nlp"]], days=30, now=NOW)}  # fmt: skip
    vision = rows[("vision", "a100")]
    assert vision["figures"]["use_p90"] == 2.0 and vision["figures"]["usage_percent_p90"] == 25.0
    assert [r["kind"] for r in vision["recommendations"]] == ["release"]
    assert vision["recommendations"][0]["suggested_nominal_gpus"] == 2
    nlp = rows[("nlp", "a100")]
    assert nlp["figures"]["borrowing_hours_share"] == pytest.approx(240 / 720, abs=1e-3)
    assert [r["kind"] for r in nlp["recommendations"]] == ["raise"]
    assert nlp["recommendations"][0]["suggested_nominal_gpus"] == 6
    # A team whose GPU-hours were idle (below its tier's threshold) is told to settle that.
    PriorityTier.objects.filter(name="experiment").update(idle_threshold_percent=70)
    rows = quota_evidence(teams=[w["vision"]], days=30, now=NOW, pool=w["a100"])
    assert "idle" in [r["kind"] for r in rows[0]["recommendations"]]
    # The l4 quota with no use at all recommends nothing it cannot measure.
    l4 = quota_evidence(teams=[w["vision"]], days=30, now=NOW, pool=w["l4"])[0]
    assert l4["figures"]["hours_with_data"] == 0 and l4["recommendations"] == []


@pytest.fixture
def rule(quota_world):
    return QuotaAutoApproval.objects.create(
        enabled=True, min_usage_percent=90, max_increase_gpus=4, max_increase_percent=50
    )


def test_an_increase_the_evidence_supports_is_approved_automatically(quota_world, rule):
    w = quota_world
    _held(w, w["vision"], w["a100"], 8, 720)  # uses all of its 8
    request = quota_request_create(
        actor=w["bob"], team=w["vision"], pool=w["a100"], nominal_gpus=10, borrowing_limit=4,
        lending_limit=2, justification="bigger runs",
    )  # fmt: skip
    assert request.state == QuotaRequest.State.APPROVED and request.decided_by is None
    assert request.decision_reason.startswith("Approved automatically on evidence: p90 use 8")
    event = AuditEvent.objects.get(verb="quota_request.auto_approve")
    assert event.after["use_p90"] == 8.0 and event.after["increase"] == 2
    assert event.after["capacity_left"] == 12  # 16 in the pool, nlp holds 4
    assert w["vision"].quotas.get(pool=w["a100"]).nominal_gpus == 10


@pytest.mark.parametrize(
    "held, asked, why",
    [
        (8, 13, "+5 GPUs is more than the rule's 4"),
        (6, 10, "its p90 use is 6 of 8 GPUs (75 %), below the rule's 90 %"),
        (0, 9, "no measured use in the last 30 days"),
    ],
)
def test_what_the_evidence_does_not_support_waits_for_a_manager(quota_world, rule, held, asked,
                                                                 why):  # fmt: skip
    w = quota_world
    if held:
        _held(w, w["vision"], w["a100"], held, 720)
    request = quota_request_create(
        actor=w["bob"], team=w["vision"], pool=w["a100"], nominal_gpus=asked, borrowing_limit=4,
        lending_limit=2, justification="bigger runs",
    )  # fmt: skip
    assert request.state == QuotaRequest.State.PENDING
    check = AuditEvent.objects.get(verb="quota_request.auto_check", object_id=str(request.pk))
    assert why in check.message
    assert w["vision"].quotas.get(pool=w["a100"]).nominal_gpus == 8


def test_the_rule_is_off_by_default_and_only_admins_change_it(quota_world, api_as, client):
    w = quota_world
    _held(w, w["vision"], w["a100"], 8, 720)
    request = quota_request_create(
        actor=w["bob"], team=w["vision"], pool=w["a100"], nominal_gpus=10, borrowing_limit=4,
        lending_limit=2, justification="bigger runs",
    )  # fmt: skip
    assert request.state == QuotaRequest.State.PENDING
    assert not AuditEvent.objects.filter(verb__startswith="quota_request.auto").exists()
    url = "/api/v1/quota-auto-approval/"
    assert api_as(w["alice"]).get(url).json()["enabled"] is False
    assert api_as(w["maria"]).patch(url, {"enabled": True}, format="json").status_code == 403
    bad = api_as(w["admin"]).patch(url, {"min_usage_percent": 0}, format="json")
    assert bad.status_code == 400 and "min_usage_percent" in bad.json()
    ok = api_as(w["admin"]).patch(url, {"enabled": True, "lookback_days": 14}, format="json")
    assert ok.status_code == 200 and ok.json()["lookback_days"] == 14
    assert AuditEvent.objects.get(verb="quota_auto_approval.change").after["enabled"] is True
    client.force_login(w["admin"])
    page = client.post("/quota/recommendations/", {
        "enabled": "on", "min_usage_percent": "101", "max_increase_gpus": "4",
        "max_increase_percent": "50", "lookback_days": "30"})  # fmt: skip
    assert page.status_code == 400 and "less than or equal to 100" in page.content.decode()


def test_recommendations_are_for_managers_of_the_team_and_admins(quota_world, api_as, client):
    w = quota_world
    _held(w, w["vision"], w["a100"], 2, 700)
    assert api_as(w["alice"]).get("/api/v1/quota-recommendations/").status_code == 403
    rows = api_as(w["maria"]).get("/api/v1/quota-recommendations/").json()["items"]
    assert {r["team"] for r in rows} == {"vision", "nlp"}
    vision = next(r for r in rows if r["team"] == "vision" and r["pool"] == "a100")
    assert vision["recommendations"][0]["kind"] == "release"
    assert api_as(w["pablo"]).get("/api/v1/quota-recommendations/").json()["items"] == []
    bad = api_as(w["maria"]).get("/api/v1/quota-recommendations/?days=0")
    assert bad.status_code == 400 and "days" in bad.json()
    client.force_login(w["maria"])
    page = client.get("/quota/recommendations/").content.decode()
    assert 'data-team="vision" data-pool="a100"' in page and "could go back" in page
    assert "Save rule" not in page
    client.force_login(w["carol"])
    assert client.get("/quota/recommendations/").status_code == 403
