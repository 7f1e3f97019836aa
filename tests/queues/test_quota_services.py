"""Quota request services: validation, the approval state machine, bursts, holds, audit, mail."""

import datetime as dt
import threading

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from queues import tasks
from queues.models import AuditEvent, ManagedObject, Quota, QuotaRequest
from queues.selectors.approvers import quota_request_approvers
from queues.selectors.quotas import decision_queue, pool_capacity, quota_request_list
from queues.services import quotas as quota_services
from queues.services.holds import team_queue_hold
from queues.services.reconcile import managed_objects_sync
from queues.services.tiers import tier_save
from tests.factories import MembershipFactory, UserFactory, manager_of
from tests.queues.builders import quota_world_setup


def _file(quota_world, user="bob", **kw):
    values = {
        "team": quota_world["vision"],
        "pool": quota_world["a100"],
        "nominal_gpus": 10,
        "justification": "Training the new detector.",
    }
    values.update(kw)
    return quota_services.quota_request_create(actor=quota_world[user], **values)


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
def test_bad_input_gives_field_errors(quota_world, changes, field, text):
    with pytest.raises(ValidationError) as info:
        _file(quota_world, **changes)
    assert text in info.value.message_dict[field][0]
    assert not QuotaRequest.objects.exists()


def test_only_team_members_can_file(quota_world):
    with pytest.raises(PermissionDenied):
        _file(quota_world, user="carol")  # carol is in nlp, not vision
    with pytest.raises(PermissionDenied):
        _file(quota_world, user="maria")


def test_a_leads_decrease_is_approved_automatically(
    quota_world, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        request = _file(
            quota_world,
            user="bob",
            nominal_gpus=6,
            borrowing_limit=2,
            lending_limit=2,
            justification="",
        )
    assert request.state == QuotaRequest.State.APPROVED
    assert request.decided_by is None
    quota = Quota.objects.get(team=quota_world["vision"], pool=quota_world["a100"])
    assert (quota.nominal_gpus, quota.borrowing_limit) == (6, 2)
    # The new ClusterQueue generation is rendered now; the worker applies it after commit.
    row = ManagedObject.objects.get(kind="ClusterQueue", name="qm-vision")
    assert request.awaiting_generation == row.desired_generation
    assert callbacks  # reconcile enqueued + e-mail


def test_a_researchers_decrease_is_a_request_like_any_other(quota_world):
    with pytest.raises(ValidationError) as caught:
        _file(quota_world, user="alice", nominal_gpus=1, justification="")
    assert "justification" in caught.value.message_dict
    request = _file(quota_world, user="alice", nominal_gpus=1, justification="Done with it.")
    assert request.state == QuotaRequest.State.PENDING
    assert Quota.objects.get(team=quota_world["vision"], pool=quota_world["a100"]).nominal_gpus == 8
    assert list(decision_queue(user=quota_world["maria"])) == [request]


def test_nobody_decides_their_own_quota_request(quota_world):
    """A manager who is also in the team files a request: another manager decides it, and
    with none, the platform admins."""
    maria = quota_world["maria"]
    MembershipFactory(user=maria, team=quota_world["vision"], role="lead")
    request = _file(quota_world, user="maria")
    with pytest.raises(PermissionDenied, match="Nobody decides their own request"):
        quota_services.quota_request_approve(quota_request=request, approver=maria)
    assert list(decision_queue(user=maria)) == []
    # No other manager of Research: it goes to the platform admins.
    assert quota_request_approvers(quota_request=request).describe() == "a platform admin (admin)"
    assert list(decision_queue(user=quota_world["admin"])) == [request]
    # Another manager joins the department: the decision is theirs, not the admins'.
    other = manager_of(quota_world["research"], "mona")
    assert list(decision_queue(user=quota_world["admin"])) == []
    assert list(decision_queue(user=other)) == [request]
    with pytest.raises(PermissionDenied, match="Only a manager of Research"):
        quota_services.quota_request_approve(quota_request=request, approver=quota_world["admin"])
    quota_services.quota_request_approve(quota_request=request, approver=other)
    request.refresh_from_db()
    assert request.state == QuotaRequest.State.APPROVED and request.decided_by == other


def test_only_the_requester_or_a_lead_withdraws(quota_world):
    request = _file(quota_world, user="alice")
    MembershipFactory(user=UserFactory(username="eve"), team=quota_world["vision"])
    for outsider in ("carol", "maria"):
        with pytest.raises(PermissionDenied):
            quota_services.quota_request_cancel(quota_request=request, actor=quota_world[outsider])
    from django.contrib.auth import get_user_model

    eve = get_user_model().objects.get(username="eve")
    with pytest.raises(PermissionDenied, match="Only who filed the request or a lead"):
        quota_services.quota_request_cancel(quota_request=request, actor=eve)
    quota_services.quota_request_cancel(quota_request=request, actor=quota_world["bob"])
    request.refresh_from_db()
    assert request.state == QuotaRequest.State.CANCELLED


def test_increase_waits_for_a_manager(quota_world):
    request = _file(quota_world)
    assert request.state == QuotaRequest.State.PENDING
    assert list(decision_queue(user=quota_world["maria"])) == [request]
    assert list(decision_queue(user=quota_world["pablo"])) == []
    assert Quota.objects.get(team=quota_world["vision"], pool=quota_world["a100"]).nominal_gpus == 8


def test_approve_updates_quota_audits_and_mails(
    quota_world, monkeypatch, django_capture_on_commit_callbacks
):
    request = _file(quota_world, nominal_gpus=10, borrowing_limit=4, lending_limit=2)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        quota_services.quota_request_approve(
            quota_request=request, approver=quota_world["maria"], reason="ok"
        )
    request.refresh_from_db()
    assert request.state == QuotaRequest.State.APPROVED
    assert request.decided_by == quota_world["maria"]
    assert request.granted_nominal_gpus == 10
    assert (
        Quota.objects.get(team=quota_world["vision"], pool=quota_world["a100"]).nominal_gpus == 10
    )
    verbs = set(AuditEvent.objects.values_list("verb", flat=True))
    assert {"quota_request.create", "quota_request.approve", "quota.change"} <= verbs
    change = AuditEvent.objects.get(verb="quota.change")
    assert change.before["nominal_gpus"] == 8 and change.after["nominal_gpus"] == 10
    assert change.department == quota_world["research"]
    sent = []
    monkeypatch.setattr(tasks.send_email, "delay", lambda *args: sent.append(args))
    monkeypatch.setattr(tasks.reconcile_cluster, "delay", lambda *args: None)
    for callback in callbacks:
        callback()
    ((recipients, subject, _body),) = sent
    assert "approved" in subject and recipients == [quota_world["bob"].email]


def test_trimmed_approval(quota_world):
    request = _file(quota_world, nominal_gpus=12, borrowing_limit=6)
    quota_services.quota_request_approve(
        quota_request=request, approver=quota_world["maria"], nominal_gpus=9, borrowing_limit=2
    )
    quota = Quota.objects.get(team=quota_world["vision"], pool=quota_world["a100"])
    assert (quota.nominal_gpus, quota.borrowing_limit) == (9, 2)
    with pytest.raises(ValidationError):
        quota_services.quota_request_approve(
            quota_request=_file(quota_world, nominal_gpus=10),
            approver=quota_world["maria"],
            nominal_gpus=11,
        )


def test_approval_beyond_capacity_is_refused_by_how_much(quota_world):
    # a100: 16 GPUs; nlp holds 4 → vision can have at most 12.
    request = _file(quota_world, nominal_gpus=15)
    with pytest.raises(ValidationError) as info:
        quota_services.quota_request_approve(quota_request=request, approver=quota_world["maria"])
    message = info.value.message_dict["nominal_gpus"][0]
    assert "exceed a100's capacity by 3 GPUs" in message
    request.refresh_from_db()
    assert request.state == QuotaRequest.State.PENDING
    assert Quota.objects.get(team=quota_world["vision"], pool=quota_world["a100"]).nominal_gpus == 8
    # Trimming to what fits works; so does an admin allowing oversubscription.
    quota_services.quota_request_approve(
        quota_request=request, approver=quota_world["maria"], nominal_gpus=12
    )
    quota_world["a100"].allow_oversubscription = True
    quota_world["a100"].save()
    big = _file(quota_world, nominal_gpus=40)
    quota_services.quota_request_approve(quota_request=big, approver=quota_world["maria"])
    assert (
        Quota.objects.get(team=quota_world["vision"], pool=quota_world["a100"]).nominal_gpus == 40
    )
    assert pool_capacity(pool=quota_world["a100"])["left"] == 16 - 44


def test_deciding_twice_is_a_clean_error(quota_world):
    request = _file(quota_world)
    quota_services.quota_request_approve(quota_request=request, approver=quota_world["maria"])
    with pytest.raises(ValidationError, match="already approved by maria"):
        quota_services.quota_request_approve(quota_request=request, approver=quota_world["maria"])
    with pytest.raises(ValidationError, match="already approved"):
        quota_services.quota_request_reject(
            quota_request=request, approver=quota_world["maria"], reason="no"
        )
    assert AuditEvent.objects.filter(verb="quota.change").count() == 1


def test_reject_needs_a_reason_and_a_manager(quota_world):
    request = _file(quota_world)
    with pytest.raises(ValidationError):
        quota_services.quota_request_reject(
            quota_request=request, approver=quota_world["maria"], reason=""
        )
    for outsider in ("bob", "alice", "pablo", "frank", "admin"):
        with pytest.raises(PermissionDenied):
            quota_services.quota_request_reject(
                quota_request=request, approver=quota_world[outsider], reason="x"
            )
        with pytest.raises(PermissionDenied):
            quota_services.quota_request_approve(
                quota_request=request, approver=quota_world[outsider]
            )
    quota_services.quota_request_reject(
        quota_request=request, approver=quota_world["maria"], reason="Not now."
    )
    request.refresh_from_db()
    assert request.state == QuotaRequest.State.REJECTED
    assert request.decision_reason == "Not now."


@pytest.mark.django_db(transaction=True)
def test_double_approval_in_two_sessions_applies_once(world, settings):
    settings.CELERY_BROKER_URL = "memory://"
    quota_world = quota_world_setup(world)
    request = _file(quota_world)
    barrier = threading.Barrier(2)
    outcomes = []

    def approve():
        try:
            barrier.wait()
            quota_services.quota_request_approve(
                quota_request=request, approver=quota_world["maria"]
            )
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


def test_burst_grant_reverts_at_its_end(quota_world):
    ends = timezone.now() + dt.timedelta(days=2)
    request = _file(quota_world, nominal_gpus=12, ends_at=ends)
    quota_services.quota_request_approve(quota_request=request, approver=quota_world["maria"])
    quota = Quota.objects.get(team=quota_world["vision"], pool=quota_world["a100"])
    assert (quota.nominal_gpus, quota.base_nominal_gpus, quota.ends_at) == (12, 8, ends)
    assert tasks.expire_burst_grants() == []  # not yet
    Quota.objects.filter(pk=quota.pk).update(ends_at=timezone.now() - dt.timedelta(seconds=1))
    assert tasks.expire_burst_grants() == [quota.pk]
    quota.refresh_from_db()
    assert (quota.nominal_gpus, quota.borrowing_limit, quota.lending_limit) == (8, 4, 2)
    assert quota.ends_at is None and quota.base_nominal_gpus is None
    assert AuditEvent.objects.filter(verb="quota.burst_expired").exists()
    row = ManagedObject.objects.get(kind="ClusterQueue", name="qm-vision")
    nominal = row.desired["spec"]["resourceGroups"][0]["flavors"][0]["resources"][-1]
    assert nominal["nominalQuota"] == 12  # re-rendered by the reconcile the expiry enqueued


def test_a_burst_where_the_team_had_no_quota_leaves_none(quota_world):
    """nlp has no L4 quota: a burst there must not leave 0 nominal with unlimited borrowing."""
    ends = timezone.now() + dt.timedelta(days=1)
    dave = UserFactory(username="dave")
    MembershipFactory(user=dave, team=quota_world["nlp"], role="lead")
    request = quota_services.quota_request_create(
        actor=dave, team=quota_world["nlp"], pool=quota_world["l4"], nominal_gpus=2,
        ends_at=ends, justification="Demo week.",
    )  # fmt: skip
    quota_services.quota_request_approve(quota_request=request, approver=quota_world["maria"])
    quota = Quota.objects.get(team=quota_world["nlp"], pool=quota_world["l4"])
    assert quota.nominal_gpus == 2 and quota.base_absent
    Quota.objects.filter(pk=quota.pk).update(ends_at=timezone.now() - dt.timedelta(seconds=1))
    assert tasks.expire_burst_grants() == [quota.pk]
    assert not Quota.objects.filter(team=quota_world["nlp"], pool=quota_world["l4"]).exists()
    event = AuditEvent.objects.get(verb="quota.burst_expired")
    assert event.before["nominal_gpus"] == 2 and event.after is None
    managed_objects_sync(cluster=quota_world["cluster"])  # what the enqueued reconcile renders
    row = ManagedObject.objects.get(kind="ClusterQueue", name="qm-nlp")
    flavors = row.desired["spec"]["resourceGroups"][0]["flavors"]
    assert [f["name"] for f in flavors] == ["a100"]  # no l4 entry left in the ClusterQueue


def test_settle_follows_what_the_cluster_accepted(quota_world):
    cluster_id, settle = quota_world["cluster"].pk, quota_services.quota_requests_settle
    ok = _file(quota_world, nominal_gpus=10)
    quota_services.quota_request_approve(quota_request=ok, approver=quota_world["maria"])
    ok.refresh_from_db()
    row = ManagedObject.objects.get(kind="ClusterQueue", name="qm-vision")
    assert ok.awaiting_generation == row.desired_generation > row.applied_generation
    assert settle(cluster_id=cluster_id) == {"applied": 0, "failed": 0}
    ManagedObject.objects.filter(pk=row.pk).update(applied_generation=ok.awaiting_generation)
    assert settle(cluster_id=cluster_id) == {"applied": 1, "failed": 0}
    ok.refresh_from_db()
    assert ok.state == QuotaRequest.State.APPLIED and ok.applied_at
    bad = _file(quota_world, nominal_gpus=11)
    quota_services.quota_request_approve(quota_request=bad, approver=quota_world["maria"])
    bad.refresh_from_db()
    ManagedObject.objects.filter(pk=row.pk).update(
        failed_generation=bad.awaiting_generation, last_error="422 Invalid: nominalQuota is bad"
    )
    assert settle(cluster_id=cluster_id) == {"applied": 0, "failed": 1}
    bad.refresh_from_db()
    assert bad.state == QuotaRequest.State.FAILED
    assert bad.apply_error == "422 Invalid: nominalQuota is bad"
    # Settling again changes nothing; a later apply that carries the quota after all does.
    assert settle(cluster_id=cluster_id) == {"applied": 0, "failed": 0}
    ManagedObject.objects.filter(pk=row.pk).update(
        applied_generation=bad.awaiting_generation + 1, failed_generation=None, last_error=""
    )
    quota_services.quota_requests_settle(cluster_id=cluster_id)
    bad.refresh_from_db()
    assert bad.state == QuotaRequest.State.APPLIED and bad.apply_error == ""
    assert AuditEvent.objects.filter(verb="quota_request.applied").count() == 2


def test_queue_hold_and_release(quota_world, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        team_queue_hold(team=quota_world["vision"], reason="May budget spent", actor=None)
    quota_world["vision"].refresh_from_db()
    assert quota_world["vision"].queue_hold_reason == "May budget spent"
    team_queue_hold(team=quota_world["vision"], reason=None, actor=quota_world["admin"])
    quota_world["vision"].refresh_from_db()
    assert quota_world["vision"].queue_hold_reason == ""
    verbs = list(AuditEvent.objects.order_by("id").values_list("verb", flat=True))
    assert verbs == ["team.queue_hold", "team.queue_release"]


def test_visibility_of_requests(quota_world):
    request = _file(quota_world)
    assert list(quota_request_list(user=quota_world["alice"])) == [request]
    assert list(quota_request_list(user=quota_world["maria"])) == [request]
    assert list(quota_request_list(user=quota_world["carol"])) == []
    assert list(quota_request_list(user=quota_world["pablo"])) == []


def test_tiers_are_admin_only(quota_world):
    with pytest.raises(PermissionDenied):
        tier_save(actor=quota_world["maria"], name="urgent", value=500)
    tier = tier_save(actor=quota_world["admin"], name="urgent", value=500, is_default=True)
    assert tier.is_default
    assert AuditEvent.objects.filter(verb="tier.create").exists()


def test_a_tier_that_is_not_preemptible_must_outrank_the_preemptible_ones(quota_world):
    admin = quota_world["admin"]  # production (1000, not preemptible) and experiment (100)
    with pytest.raises(ValidationError, match="must outrank every preemptible one"):
        tier_save(actor=admin, name="critical", value=50, preemptible=False)
    with pytest.raises(ValidationError, match="must stay below it"):
        tier_save(actor=admin, name="urgent", value=2000, preemptible=True)
    assert tier_save(actor=admin, name="critical", value=1500, preemptible=False).value == 1500


def test_managers_are_told_of_a_new_request_by_mail_and_on_their_home_page(
    quota_world, client, mailoutbox, django_capture_on_commit_callbacks, monkeypatch
):
    from tests.queues.builders import run_tasks_eagerly

    run_tasks_eagerly(monkeypatch)
    with django_capture_on_commit_callbacks(execute=True):
        request = _file(quota_world, user="bob", nominal_gpus=12)
    (mail,) = mailoutbox
    assert mail.to == [quota_world["maria"].email]
    assert "12 GPUs in a100" in mail.subject and f"/quota/requests/{request.pk}/" in mail.body
    client.force_login(quota_world["maria"])
    assert f"/quota/requests/{request.pk}/" in client.get("/").content.decode()
    # A lead's decrease is applied at once: nobody needs to decide it, nobody is mailed.
    mailoutbox.clear()
    with django_capture_on_commit_callbacks(execute=True):
        _file(quota_world, user="bob", nominal_gpus=6, borrowing_limit=2, lending_limit=2,
              justification="")  # fmt: skip
    assert not [m for m in mailoutbox if quota_world["maria"].email in m.to]


def test_a_request_beyond_the_pool_is_refused_and_one_beyond_what_is_left_is_warned(
    quota_world, client
):
    # a100 has 16 GPUs; nlp holds 4, so at most 12 fit for vision.
    with pytest.raises(ValidationError) as refused:
        _file(quota_world, nominal_gpus=100_000)
    assert refused.value.message_dict["nominal_gpus"] == [
        "a100 has 16 GPUs in all: ask for at most 16 (and at most 12 fit beside the other "
        "teams' quota now)."
    ]
    assert not QuotaRequest.objects.exists()
    filed = _file(quota_world, nominal_gpus=14)
    assert filed.state == QuotaRequest.State.PENDING
    assert "14 GPUs is more than the 12 left for Vision in a100" in filed.capacity_warning
    assert not hasattr(_file(quota_world, nominal_gpus=12), "capacity_warning")
    client.force_login(quota_world["bob"])
    form = {"team": quota_world["vision"].pk, "pool": quota_world["a100"].pk,
            "nominal_gpus": 13, "justification": "More detectors."}  # fmt: skip
    page = client.post(reverse("quota-request-new"), form, follow=True).content.decode()
    assert "13 GPUs is more than the 12 left for Vision in a100" in page
    detail = client.get(reverse("quota-request-detail", args=[filed.pk])).content.decode()
    assert 'data-testid="capacity-left">12 GPUs' in detail
