"""Advance reservations: requests, four-eyes decisions, the capacity check, the beat's
transitions and what the team's ClusterQueue carries in each phase."""

import datetime as dt

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.utils import timezone

from queues.manifests.reservations import Limits, reserved_limits
from queues.models import AuditEvent, ManagedObject, Reservation, ReservationSettings
from queues.selectors.reservations import reservation_list, reservation_room
from queues.services import reservations as services
from queues.services.reconcile import cluster_desired_state, managed_objects_sync

S = Reservation.State
HOUR = dt.timedelta(hours=1)


def _ask(world, user="bob", **kw):
    start = timezone.now() + dt.timedelta(days=2)
    values = {
        "team": world["vision"],
        "pool": world["a100"],
        "gpus": 4,
        "starts_at": start,
        "ends_at": start + 6 * HOUR,
        "reason": "Conference deadline.",
    }
    values.update(kw)
    return services.reservation_request(actor=world[user], **values)


def _flavor(cluster, team_slug, pool_name):
    """The GPU resource of a pool's flavor in a team's rendered ClusterQueue."""
    for _, _, manifest in cluster_desired_state(cluster=cluster):
        if manifest["kind"] == "ClusterQueue" and manifest["metadata"]["name"] == f"qm-{team_slug}":
            for group in manifest["spec"]["resourceGroups"]:
                for flavor in group["flavors"]:
                    if flavor["name"] == pool_name:
                        return next(r for r in flavor["resources"] if r["name"] == "nvidia.com/gpu")
    return None


@pytest.mark.parametrize(
    ("changes", "field", "text"),
    [
        ({"gpus": 0}, "gpus", "at least 1"),
        ({"gpus": -2}, "gpus", "at least 1"),
        ({"gpus": "many"}, "gpus", "not a whole number"),
        ({"gpus": True}, "gpus", "whole number"),
        ({"pool": None}, "pool", "Choose a pool"),
        ({"starts_at": timezone.now() - HOUR}, "starts_at", "in the future"),
        ({"starts_at": None}, "starts_at", "Enter when"),
        ({"ends_at": None}, "ends_at", "Enter when"),
        ({"reason": " "}, "reason", "what the GPUs are for"),
    ],
)
def test_bad_input_gives_field_errors(quota_world, changes, field, text):
    with pytest.raises(ValidationError) as info:
        _ask(quota_world, **changes)
    assert text in info.value.message_dict[field][0]
    assert not Reservation.objects.exists()


def test_the_window_must_end_after_it_starts(quota_world):
    start = timezone.now() + dt.timedelta(days=1)
    with pytest.raises(ValidationError) as info:
        _ask(quota_world, starts_at=start, ends_at=start)
    assert "end after it starts" in info.value.message_dict["ends_at"][0]


def test_only_leads_request(quota_world):
    for user in ("alice", "carol", "maria", "frank"):  # member, other team, manager, finance
        with pytest.raises(PermissionDenied):
            _ask(quota_world, user=user)
    reservation = _ask(quota_world)
    assert reservation.state == S.PENDING
    event = AuditEvent.objects.get(verb="reservation.request")
    assert event.team == quota_world["vision"] and event.after["gpus"] == 4


def test_what_does_not_fit_beside_the_guarantees_is_refused(quota_world):
    # a100: 16 GPUs; vision 8 and nlp 4 guaranteed: 4 left.
    with pytest.raises(ValidationError) as info:
        _ask(quota_world, gpus=5)
    message = info.value.message_dict["gpus"][0]
    assert "at most 4 can be reserved" in message and "guarantee 12" in message


def test_approval_is_four_eyes_and_capacity_checked_against_overlapping_reservations(
    quota_world,
):
    w = quota_world
    first = _ask(w, gpus=3)
    with pytest.raises(PermissionDenied):
        services.reservation_approve(reservation=first, approver=w["bob"])  # own request
    with pytest.raises(PermissionDenied):
        services.reservation_approve(reservation=first, approver=w["pablo"])  # other department
    services.reservation_approve(reservation=first, approver=w["maria"])
    first.refresh_from_db()
    assert first.state == S.APPROVED and first.decided_by == w["maria"]
    # Overlapping by an hour: only 1 GPU is left then, and filing says so.
    with pytest.raises(ValidationError) as info:
        _ask(w, gpus=2, starts_at=first.ends_at - HOUR, ends_at=first.ends_at + HOUR)
    assert "at most 1 can be reserved" in info.value.message_dict["gpus"][0]


def test_a_second_approval_that_no_longer_fits_is_refused(quota_world):
    w = quota_world
    a = _ask(w, gpus=3)
    b = _ask(w, gpus=3, starts_at=a.starts_at + HOUR, ends_at=a.ends_at + HOUR)
    services.reservation_approve(reservation=a, approver=w["maria"])
    with pytest.raises(ValidationError) as info:
        services.reservation_approve(reservation=b, approver=w["maria"])
    assert "other reservations hold up to 3" in info.value.message_dict["gpus"][0]
    b.refresh_from_db()
    assert b.state == S.PENDING
    # Windows that only touch ([a, b) then [b, c)) do not overlap.
    c = _ask(w, gpus=3, starts_at=a.ends_at, ends_at=a.ends_at + HOUR)
    services.reservation_approve(reservation=c, approver=w["maria"])
    assert (
        reservation_room(pool=w["a100"], starts_at=a.starts_at, ends_at=c.ends_at)["reserved"] == 3
    )


def test_reject_needs_a_reason_and_is_audited(quota_world):
    w = quota_world
    r = _ask(w)
    with pytest.raises(ValidationError) as info:
        services.reservation_reject(reservation=r, approver=w["maria"], reason="")
    assert "reason" in info.value.message_dict
    services.reservation_reject(reservation=r, approver=w["maria"], reason="Use quota.")
    r.refresh_from_db()
    assert r.state == S.REJECTED
    assert AuditEvent.objects.filter(verb="reservation.reject", object_id=str(r.pk)).exists()
    with pytest.raises(ValidationError):
        services.reservation_approve(reservation=r, approver=w["maria"])


def test_other_teams_see_nothing(quota_world):
    w = quota_world
    r = _ask(w)
    assert list(reservation_list(user=w["alice"])) == [r]  # researcher of the team
    assert list(reservation_list(user=w["maria"])) == [r]  # the department's manager
    assert list(reservation_list(user=w["carol"])) == []  # nlp
    assert list(reservation_list(user=w["pablo"])) == []  # another department


def test_limits_rule():
    base = Limits(nominal=8, borrowing=4, lending=2)
    assert reserved_limits(base) == base
    # Lead time: the team lends up to 4 fewer (here: nothing of its 2).
    assert reserved_limits(base, holding=4) == Limits(8, 4, 0)
    assert reserved_limits(Limits(8, None, None), holding=3) == Limits(8, None, 5)
    # Window: nominal includes them, lending stays what it was without them.
    assert reserved_limits(base, active=4) == Limits(12, 4, 2)
    assert reserved_limits(Limits(8, None, None), active=4) == Limits(12, None, 8)
    # No quota in the pool: the reservation alone, nothing borrowed or lent.
    assert reserved_limits(None, holding=4) is None
    assert reserved_limits(None, active=4) == Limits(4, 0, 0)


def test_the_beat_moves_a_reservation_through_its_window_and_the_queue_follows(
    quota_world, django_capture_on_commit_callbacks
):
    w = quota_world
    ReservationSettings.objects.create(pk=1, lead_minutes=90)
    r = _ask(w, pool=w["l4"], gpus=4)  # vision: 2 L4 (no limits); l4: 8 GPUs
    services.reservation_approve(reservation=r, approver=w["maria"])
    before = _flavor(w["cluster"], "vision", "l4")
    assert before == {"name": "nvidia.com/gpu", "nominalQuota": 2}

    assert services.reservations_advance(now=r.starts_at - 2 * HOUR) == []
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        assert services.reservations_advance(now=r.starts_at - HOUR) == [r.pk]
    assert callbacks, "a reconcile is enqueued"
    r.refresh_from_db()
    assert r.state == S.HOLDING
    # Lead time: vision lends nothing of its 2 (4 fewer than all of them).
    assert _flavor(w["cluster"], "vision", "l4")["lendingLimit"] == 0
    assert _flavor(w["cluster"], "vision", "l4")["nominalQuota"] == 2

    assert services.reservations_advance(now=r.starts_at) == [r.pk]
    assert services.reservations_advance(now=r.starts_at + HOUR) == []  # re-run: no-op
    r.refresh_from_db()
    assert r.state == S.ACTIVE
    assert _flavor(w["cluster"], "vision", "l4") == {
        "name": "nvidia.com/gpu", "nominalQuota": 6, "lendingLimit": 2,
    }  # fmt: skip

    assert services.reservations_advance(now=r.ends_at) == [r.pk]
    r.refresh_from_db()
    assert r.state == S.ENDED
    assert _flavor(w["cluster"], "vision", "l4") == before
    verbs = list(
        AuditEvent.objects.filter(object_id=str(r.pk), object_type="reservation")
        .order_by("pk")
        .values_list("verb", flat=True)
    )
    assert verbs == [
        "reservation.request", "reservation.approve", "reservation.hold",
        "reservation.activate", "reservation.expire",
    ]  # fmt: skip


def test_a_team_without_quota_in_the_pool_gets_one_for_the_window(quota_world):
    w = quota_world
    r = _ask(w, team=w["nlp"], pool=w["l4"], gpus=3, user="admin")
    services.reservation_approve(reservation=r, approver=w["maria"])
    assert _flavor(w["cluster"], "nlp", "l4") is None
    services.reservations_advance(now=r.starts_at + HOUR)
    assert _flavor(w["cluster"], "nlp", "l4") == {
        "name": "nvidia.com/gpu", "nominalQuota": 3, "borrowingLimit": 0, "lendingLimit": 0,
    }  # fmt: skip
    # The rendered change reaches the managed rows (a new generation to apply).
    managed_objects_sync(cluster=w["cluster"])
    row = ManagedObject.objects.get(kind="ClusterQueue", name="qm-nlp")
    assert row.desired_generation > (row.applied_generation or 0)


def test_a_beat_that_missed_the_lead_time_goes_straight_to_active(quota_world):
    w = quota_world
    r = _ask(w)
    services.reservation_approve(reservation=r, approver=w["maria"])
    services.reservations_advance(now=r.starts_at + dt.timedelta(minutes=5))
    r.refresh_from_db()
    assert r.state == S.ACTIVE and r.holding_since is not None


def test_cancelling_an_active_reservation_ends_it_now(quota_world):
    w = quota_world
    r = _ask(w)
    services.reservation_approve(reservation=r, approver=w["maria"])
    services.reservations_advance(now=r.starts_at + HOUR)
    with pytest.raises(PermissionDenied):
        services.reservation_cancel(reservation=r, actor=w["alice"])
    cut = r.starts_at + 2 * HOUR
    services.reservation_cancel(reservation=r, actor=w["bob"], now=cut)
    r.refresh_from_db()
    assert r.state == S.CANCELLED and r.ends_at == cut
    assert _flavor(w["cluster"], "vision", "a100")["nominalQuota"] == 8
    with pytest.raises(ValidationError):
        services.reservation_cancel(reservation=r, actor=w["bob"])


def test_lead_time_is_set_by_admins_only(quota_world):
    w = quota_world
    with pytest.raises(PermissionDenied):
        services.reservation_settings_update(actor=w["maria"], lead_minutes=30)
    with pytest.raises(ValidationError):
        services.reservation_settings_update(actor=w["admin"], lead_minutes=-1)
    services.reservation_settings_update(actor=w["admin"], lead_minutes=30)
    assert ReservationSettings.current().lead_minutes == 30
    assert AuditEvent.objects.filter(verb="reservation.settings").exists()


def test_the_start_estimate_counts_the_reservation_in_force(quota_world):
    """vision: 2 L4 of its own; with 4 reserved in their window a 6-GPU job fits now (and the
    submit check's ceiling grows), nlp, with no quota of its own, can run only while its own
    reservation is open."""
    from queues.selectors.jobs import start_estimator, team_job_pools, team_pool_limits

    w = quota_world
    now = timezone.now()
    estimate = start_estimator(team=w["vision"], pools=[w["l4"]], now=now)
    assert estimate(gpus=6)[0] is None  # beyond vision's ceiling of 2
    assert team_pool_limits(team=w["vision"], name="l4")["ceiling"] == 2
    r = _ask(w, pool=w["l4"], gpus=4)
    services.reservation_approve(reservation=r, approver=w["maria"])
    services.reservations_advance(now=r.starts_at)
    estimate = start_estimator(team=w["vision"], pools=[w["l4"]], now=now)
    assert estimate(gpus=6)[0] == now
    assert "reservation of 4 GPUs in l4" in estimate(gpus=6)[1]
    assert team_pool_limits(team=w["vision"], name="l4")["ceiling"] == 6
    # nlp (same department) cannot borrow vision's reserved GPUs: nothing to borrow in l4.
    assert team_pool_limits(team=w["nlp"], name="l4") is None
    n = _ask(w, team=w["nlp"], pool=w["l4"], gpus=2, user="admin")
    services.reservation_approve(reservation=n, approver=w["maria"])
    assert w["l4"] not in team_job_pools(team=w["nlp"])
    services.reservations_advance(now=n.starts_at)
    assert w["l4"] in team_job_pools(team=w["nlp"])
    limits = team_pool_limits(team=w["nlp"], name="l4")
    # Its own 2; of vision's 6, only the 2 vision lends without the reservation can be borrowed.
    assert limits["nominal"] == 2 and limits["lendable_in_cohort"] == 2
    assert limits["ceiling"] == 2  # a reservation's quota borrows nothing


def test_on_volcano_the_leaf_queue_deserves_and_guarantees_the_reserved_gpus(quota_world):
    w = quota_world
    w["cluster"].scheduler = "volcano"
    w["cluster"].save()
    r = _ask(w, pool=w["l4"], gpus=4)  # vision: 2 L4, no limits
    services.reservation_approve(reservation=r, approver=w["maria"])

    def leaf():
        wanted = {"quartermaster.dev/pool": "l4", "quartermaster.dev/team": "vision"}
        return next(
            m["spec"] for _, _, m in cluster_desired_state(cluster=w["cluster"])
            if m["kind"] == "Queue" and wanted.items() <= m["metadata"]["labels"].items()
        )  # fmt: skip

    assert leaf()["deserved"] == {"nvidia.com/gpu": "2"} and "guarantee" not in leaf()
    services.reservations_advance(now=r.starts_at - HOUR)
    assert leaf()["guarantee"] == {"resource": {"nvidia.com/gpu": "2"}}  # lends none of its 2
    services.reservations_advance(now=r.starts_at)
    assert leaf()["deserved"] == {"nvidia.com/gpu": "6"}
    assert leaf()["guarantee"] == {"resource": {"nvidia.com/gpu": "4"}}  # the reserved 4


def test_a_request_nobody_decided_is_withdrawn_when_its_window_ends(quota_world):
    w = quota_world
    r = _ask(w)
    assert services.reservations_advance(now=r.starts_at + HOUR) == []  # still decidable
    assert services.reservations_advance(now=r.ends_at) == [r.pk]
    r.refresh_from_db()
    assert r.state == S.CANCELLED
    assert AuditEvent.objects.get(verb="reservation.expire", object_id=str(r.pk)).actor is None
    # The beat saw an approved one only after its window: it ends, never opened, not billed.
    late = _ask(w, starts_at=r.starts_at + dt.timedelta(days=1),
                ends_at=r.ends_at + dt.timedelta(days=1))  # fmt: skip
    services.reservation_approve(reservation=late, approver=w["maria"])
    services.reservations_advance(now=late.ends_at + HOUR)
    late.refresh_from_db()
    assert late.state == S.ENDED and late.activated_at is None


def test_a_volcano_start_estimate_counts_the_open_reservation(quota_world):
    from queues.selectors.volcano_queue import volcano_start_estimator

    w = quota_world
    w["cluster"].scheduler = "volcano"
    w["cluster"].save()
    now = timezone.now()
    # vision: 8 A100, may borrow 4: a leaf queue capability of 12.
    assert volcano_start_estimator(team=w["vision"], pools=[w["a100"]], now=now)(gpus=14)[0] is None
    r = _ask(w, gpus=4)
    services.reservation_approve(reservation=r, approver=w["maria"])
    services.reservations_advance(now=r.starts_at)
    estimate = volcano_start_estimator(team=w["vision"], pools=[w["a100"]], now=now)
    assert estimate(gpus=14)[0] == now  # 12 + the 4 reserved, all 16 idle
