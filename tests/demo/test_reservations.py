"""The demo's advance reservations, as `make run` has them: one open now (in vision's
ClusterQueue in the demo kubesim), one for a manager to decide, one ended last month and on its
report; seeding them again adds none."""

from __future__ import annotations

import pytest

from billing.periods import month_start
from billing.selectors.reports import build_report
from demo.queues import seed_reservations
from fleet import kube
from queues.models import Reservation

pytestmark = pytest.mark.django_db


def test_the_demo_has_a_reservation_in_each_state_and_renders_the_open_one(seeded_demo):
    states = dict(Reservation.objects.values_list("state", "team__slug"))
    assert states == {"active": "vision", "pending": "speech", "ended": "vision"}
    assert seed_reservations() == 0
    cq = kube.client_for(seeded_demo["cluster"]).get(
        "kueue.x-k8s.io/v1beta2", "ClusterQueue", "qm-vision"
    )
    h100 = next(f for g in cq["spec"]["resourceGroups"] for f in g["flavors"]
                if f["name"] == "h100")  # fmt: skip
    gpu = next(r for r in h100["resources"] if r["name"] == "nvidia.com/gpu")
    assert (str(gpu["nominalQuota"]), str(gpu["borrowingLimit"]), str(gpu["lendingLimit"])) == (
        "4", "0", "0")  # fmt: skip


def test_last_months_report_bills_the_ended_reservation(seeded_demo):
    ended = Reservation.objects.get(state="ended")
    report = build_report(month=month_start(ended.starts_at.date()))
    vision = next(t for t in report["teams"] if t["team"] == "vision")
    line = vision["reservations"]["lines"][0]
    # 4 H100 for 8 hours at 4.50, vision billed by allocation.
    assert line["reservation_id"] == ended.pk and line["gpu_hours_held"] == "32.0000"
    assert vision["reservations"]["charge"] == "144.00"
