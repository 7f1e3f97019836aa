"""Advance reservations in the what-if: the replay changes the reserving team's ClusterQueue
when the reservation's lead time and window did on the cluster."""

from __future__ import annotations

from datetime import timedelta

from planning.services.whatif import whatif_compute
from planning.services.whatif.reservations import quotas_at, reservation_phases
from queues.models import Reservation
from tests.planning.test_whatif import HOUR, history  # noqa: F401  (the fixture)


def _held(w, *, start, hours, state=Reservation.State.ENDED, **kw):
    kw = {"holding_since": start - timedelta(hours=1), "activated_at": start,
          "finished_at": start + timedelta(hours=hours), **kw}  # fmt: skip
    return Reservation.objects.create(
        team=w["vision"], pool=w["a100"], gpus=4, starts_at=start,
        ends_at=start + timedelta(hours=hours), reason="deadline", state=state,
        requested_by=w["bob"], **kw,
    )  # fmt: skip


def test_a_reservation_in_the_window_lets_the_team_run_two_jobs_at_once(history):  # noqa: F811
    w = history
    start = w["end"] - timedelta(days=1)
    before = whatif_compute(days=1, proposal={}, now=w["end"])
    vision = str(w["vision"].pk)
    assert before["today"]["teams"][vision]["wait_p50_seconds"] == 2.5 * HOUR
    assert before["reservations"] == []
    # 4 more A100 for vision from the first submission for 12 hours: nominal 12 + borrowing 4
    # is room for two of its 8-GPU jobs at once.
    r = _held(w, start=start + timedelta(hours=1), hours=12)
    after = whatif_compute(days=1, proposal={}, now=w["end"])
    today = after["today"]["teams"][vision]
    assert today["wait_p90_seconds"] < before["today"]["teams"][vision]["wait_p90_seconds"]
    assert today["wait_p50_seconds"] < 2.5 * HOUR
    assert [row["id"] for row in after["reservations"]] == [r.pk]
    # The proposal scenario holds it too.
    assert after["proposal"]["teams"][vision]["wait_p50_seconds"] == today["wait_p50_seconds"]


def test_phases_follow_what_the_beat_recorded(history):  # noqa: F811
    w = history
    start = w["end"] - timedelta(days=1)
    r = _held(w, start=start + timedelta(hours=3), hours=2)
    cancelled = _held(w, start=start + timedelta(hours=10), hours=4,
                      state=Reservation.State.CANCELLED)  # fmt: skip
    # Approved but never reached its lead time: no phase.
    _held(w, start=start + timedelta(hours=20), hours=1, state=Reservation.State.APPROVED,
          holding_since=None, activated_at=None, finished_at=None)  # fmt: skip
    phases = reservation_phases(cluster=w["cluster"], start=start, end=w["end"])
    assert [(p[2], p[3].pk) for p in phases] == [
        ("holding", r.pk), ("active", r.pk), ("holding", cancelled.pk), ("active", cancelled.pk)
    ]  # fmt: skip
    base = {(w["vision"].pk, w["a100"].pk): (8, 4, 2)}
    key = (w["vision"].pk, w["a100"].pk)
    assert quotas_at(base, phases, start)[key] == (8, 4, 2)
    assert quotas_at(base, phases, start + timedelta(hours=2, minutes=30))[key] == (8, 4, 0)
    assert quotas_at(base, phases, start + timedelta(hours=4))[key] == (12, 4, 2)
    assert quotas_at(base, phases, start + timedelta(hours=5))[key] == (8, 4, 2)
