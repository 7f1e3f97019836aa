"""Quota request services: validation, the approval state machine, bursts, holds, audit, mail."""

import datetime as dt
import threading

import pytest
from django.core import mail
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import connection
from django.utils import timezone

from queues import tasks
from queues.models import AuditEvent, ManagedObject, Quota, QuotaRequest
from queues.selectors.governance import decision_queue, pool_capacity, quota_request_list
from queues.services import governance
from tests.queues.gov_fixtures import gov_world


@pytest.fixture
def gov(world):
    return gov_world(world)


def _file(gov, user="bob", **kw):
    values = {
        "team": gov["vision"],
        "pool": gov["a100"],
        "nominal_gpus": 10,
        "justification": "Training the new detector.",
    }
    values.update(kw)
    return governance.quota_request_create(actor=gov[user], **values)


@pytest.mark.parametrize(
    ("changes", "field", "text"),
    [
        ({"nominal_gpus": 0}, "nominal_gpus", "at least 1"),
        ({"nominal_gpus": -3}, "nominal_gpus", "at least 1"),
        ({"nominal_gpus": "lots"}, "nominal_gpus", "not a whole number"),
        ({"borrowing_limit": -1}, "borrowing_limit", "0 or a positive"),
        ({"lending_limit": 12}, "lending_limit", "cannot exceed the nominal quota"),
        ({"ends_at": timezone.now() - dt.timedelta(days=1)}, "ends_at", "in the future"),
        ({"pool": None}, "pool", "Choose a pool"),
        ({"justification": "  "}, "justification", "what the GPUs are for"),
    ],
)
def test_bad_input_gives_field_errors(gov, changes, field, text):
    with pytest.raises(ValidationError) as info:
        _file(gov, **changes)
    assert text in info.value.message_dict[field][0]
    assert not QuotaRequest.objects.exists()


def test_only_team_members_can_file(gov):
    with pytest.raises(PermissionDenied):
        _file(gov, user="carol")  # carol is in nlp, not vision
    with pytest.raises(PermissionDenied):
        _file(gov, user="maria")


def test_decrease_is_approved_automatically(gov, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        request = _file(
            gov, user="alice", nominal_gpus=6, borrowing_limit=2, lending_limit=2, justification=""
        )
    assert request.state == QuotaRequest.State.APPROVED
    assert request.decided_by is None
    quota = Quota.objects.get(team=gov["vision"], pool=gov["a100"])
    assert (quota.nominal_gpus, quota.borrowing_limit) == (6, 2)
    # The new ClusterQueue generation is rendered now; the worker applies it after commit.
    row = ManagedObject.objects.get(kind="ClusterQueue", name="qm-vision")
    assert request.awaiting_generation == row.desired_generation
    assert callbacks  # reconcile enqueued + e-mail


def test_increase_waits_for_a_manager(gov):
    request = _file(gov)
    assert request.state == QuotaRequest.State.PENDING
    assert list(decision_queue(user=gov["maria"])) == [request]
    assert list(decision_queue(user=gov["pablo"])) == []
    assert Quota.objects.get(team=gov["vision"], pool=gov["a100"]).nominal_gpus == 8


def test_approve_updates_quota_audits_and_mails(gov, django_capture_on_commit_callbacks):
    request = _file(gov, nominal_gpus=10, borrowing_limit=4, lending_limit=2)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        governance.quota_request_approve(request=request, approver=gov["maria"], reason="ok")
    request.refresh_from_db()
    assert request.state == QuotaRequest.State.APPROVED
    assert request.decided_by == gov["maria"]
    assert request.granted_nominal_gpus == 10
    assert Quota.objects.get(team=gov["vision"], pool=gov["a100"]).nominal_gpus == 10
    verbs = set(AuditEvent.objects.values_list("verb", flat=True))
    assert {"quota_request.create", "quota_request.approve", "quota.change"} <= verbs
    change = AuditEvent.objects.get(verb="quota.change")
    assert change.before["nominal_gpus"] == 8 and change.after["nominal_gpus"] == 10
    assert change.department == gov["research"]
    for callback in callbacks:
        if callback.__name__ == "send":
            callback()
    assert "approved" in mail.outbox[0].subject
    assert mail.outbox[0].to == [gov["bob"].email]


def test_trimmed_approval(gov):
    request = _file(gov, nominal_gpus=12, borrowing_limit=6)
    governance.quota_request_approve(
        request=request, approver=gov["maria"], nominal_gpus=9, borrowing_limit=2
    )
    quota = Quota.objects.get(team=gov["vision"], pool=gov["a100"])
    assert (quota.nominal_gpus, quota.borrowing_limit) == (9, 2)
    with pytest.raises(ValidationError):
        governance.quota_request_approve(
            request=_file(gov, nominal_gpus=10), approver=gov["maria"], nominal_gpus=11
        )


def test_approval_beyond_capacity_is_refused_by_how_much(gov):
    # a100: 16 GPUs; nlp holds 4 → vision can have at most 12.
    request = _file(gov, nominal_gpus=15)
    with pytest.raises(ValidationError) as info:
        governance.quota_request_approve(request=request, approver=gov["maria"])
    message = info.value.message_dict["nominal_gpus"][0]
    assert "exceed a100's capacity by 3 GPUs" in message
    request.refresh_from_db()
    assert request.state == QuotaRequest.State.PENDING
    assert Quota.objects.get(team=gov["vision"], pool=gov["a100"]).nominal_gpus == 8
    # Trimming to what fits works; so does an admin allowing oversubscription.
    governance.quota_request_approve(request=request, approver=gov["maria"], nominal_gpus=12)
    gov["a100"].allow_oversubscription = True
    gov["a100"].save()
    big = _file(gov, nominal_gpus=40)
    governance.quota_request_approve(request=big, approver=gov["maria"])
    assert Quota.objects.get(team=gov["vision"], pool=gov["a100"]).nominal_gpus == 40
    assert pool_capacity(pool=gov["a100"])["left"] == 16 - 44


def test_deciding_twice_is_a_clean_error(gov):
    request = _file(gov)
    governance.quota_request_approve(request=request, approver=gov["maria"])
    with pytest.raises(ValidationError, match="already approved by maria"):
        governance.quota_request_approve(request=request, approver=gov["maria"])
    with pytest.raises(ValidationError, match="already approved"):
        governance.quota_request_reject(request=request, approver=gov["maria"], reason="no")
    assert AuditEvent.objects.filter(verb="quota.change").count() == 1


def test_reject_needs_a_reason_and_a_manager(gov):
    request = _file(gov)
    with pytest.raises(ValidationError):
        governance.quota_request_reject(request=request, approver=gov["maria"], reason="")
    for outsider in ("bob", "alice", "pablo", "frank", "admin"):
        with pytest.raises(PermissionDenied):
            governance.quota_request_reject(request=request, approver=gov[outsider], reason="x")
        with pytest.raises(PermissionDenied):
            governance.quota_request_approve(request=request, approver=gov[outsider])
    governance.quota_request_reject(request=request, approver=gov["maria"], reason="Not now.")
    request.refresh_from_db()
    assert request.state == QuotaRequest.State.REJECTED
    assert request.decision_reason == "Not now."


@pytest.mark.django_db(transaction=True)
def test_double_approval_in_two_sessions_applies_once(world, settings):
    settings.CELERY_BROKER_URL = "memory://"
    gov = gov_world(world)
    request = _file(gov)
    barrier = threading.Barrier(2)
    outcomes = []

    def approve():
        try:
            barrier.wait()
            governance.quota_request_approve(request=request, approver=gov["maria"])
            outcomes.append("ok")
        except ValidationError as exc:
            outcomes.append(exc.messages[0])
        finally:
            connection.close()

    threads = [threading.Thread(target=approve) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes)[-1] == "ok"
    assert "already approved" in sorted(outcomes)[0]
    assert AuditEvent.objects.filter(verb="quota_request.approve").count() == 1
    assert AuditEvent.objects.filter(verb="quota.change").count() == 1


def test_burst_grant_reverts_at_its_end(gov):
    ends = timezone.now() + dt.timedelta(days=2)
    request = _file(gov, nominal_gpus=12, ends_at=ends)
    governance.quota_request_approve(request=request, approver=gov["maria"])
    quota = Quota.objects.get(team=gov["vision"], pool=gov["a100"])
    assert (quota.nominal_gpus, quota.base_nominal_gpus, quota.ends_at) == (12, 8, ends)
    assert tasks.expire_burst_grants() == []  # not yet
    Quota.objects.filter(pk=quota.pk).update(ends_at=timezone.now() - dt.timedelta(seconds=1))
    assert tasks.expire_burst_grants() == [quota.pk]
    quota.refresh_from_db()
    assert (quota.nominal_gpus, quota.borrowing_limit, quota.lending_limit) == (8, 4, 2)
    assert quota.ends_at is None and quota.base_nominal_gpus is None
    assert AuditEvent.objects.filter(verb="quota.burst_expired").exists()
    row = ManagedObject.objects.get(kind="ClusterQueue", name="qm-vision")
    nominal = row.desired["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
    assert nominal["nominalQuota"] == 12  # re-rendered by the reconcile the expiry enqueued


def test_apply_result_marks_requests(gov):
    ok = _file(gov, nominal_gpus=10)
    governance.quota_request_approve(request=ok, approver=gov["maria"])
    ok.refresh_from_db()
    governance.quota_request_apply_result(
        team_id=gov["vision"].pk,
        cluster_id=gov["cluster"].pk,
        generation=ok.awaiting_generation,
        error="",
    )
    ok.refresh_from_db()
    assert ok.state == QuotaRequest.State.APPLIED and ok.applied_at
    bad = _file(gov, nominal_gpus=11)
    governance.quota_request_approve(request=bad, approver=gov["maria"])
    bad.refresh_from_db()
    governance.quota_request_apply_result(
        team_id=gov["vision"].pk,
        cluster_id=gov["cluster"].pk,
        generation=bad.awaiting_generation,
        error="422 Invalid: nominalQuota is bad",
    )
    bad.refresh_from_db()
    assert bad.state == QuotaRequest.State.FAILED
    assert bad.apply_error == "422 Invalid: nominalQuota is bad"


def test_queue_hold_and_release(gov, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        governance.team_queue_hold(team=gov["vision"], reason="May budget spent", actor=None)
    gov["vision"].refresh_from_db()
    assert gov["vision"].queue_hold_reason == "May budget spent"
    governance.team_queue_hold(team=gov["vision"], reason=None, actor=gov["admin"])
    gov["vision"].refresh_from_db()
    assert gov["vision"].queue_hold_reason == ""
    verbs = list(AuditEvent.objects.order_by("id").values_list("verb", flat=True))
    assert verbs == ["team.queue_hold", "team.queue_release"]


def test_visibility_of_requests(gov):
    request = _file(gov)
    assert list(quota_request_list(user=gov["alice"])) == [request]
    assert list(quota_request_list(user=gov["maria"])) == [request]
    assert list(quota_request_list(user=gov["carol"])) == []
    assert list(quota_request_list(user=gov["pablo"])) == []


def test_tiers_are_admin_only(gov):
    with pytest.raises(PermissionDenied):
        governance.tier_save(actor=gov["maria"], name="urgent", value=2000)
    tier = governance.tier_save(actor=gov["admin"], name="urgent", value=2000, is_default=True)
    assert tier.is_default
    assert AuditEvent.objects.filter(verb="tier.create").exists()
