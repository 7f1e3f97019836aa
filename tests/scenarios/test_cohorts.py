"""Cohorts: borrowing within borrowingLimit, lending within lendingLimit, a Cohort's own quota,
hierarchical cohorts (a cohort lends its subtree to its parent within its lendingLimit, its
borrowingLimit caps what its queues take from above), cycles, and the lender taking back what it
lent (Kueue's "Cluster Queue" and "Cohort" concept pages and its cohort integration tests)."""

from __future__ import annotations

from tests.scenarios import objects as o
from tests.scenarios.kueue_world import (
    RECLAIM,
    a100_flavor,
    reserving,
    submit,
    teams,
    usage,
)


def test_a_queue_borrows_up_to_its_borrowing_limit(sc):
    flavor = a100_flavor(sc)
    dept = sc.unique("dept")
    t = teams(sc, flavor, {"a": {"nominal": 4, "borrowing": 2}, "b": {"nominal": 4}},
              cohorts={"a": dept, "b": dept})  # fmt: skip
    submit(sc, t["a"], "a1", 6)
    sc.wait_admitted(t["a"].ns, "a1")
    sc.wait(lambda: usage(sc, t["a"].cq) == ("6", "2"), "6 GPUs reserved, 2 of them borrowed")
    # Two more GPUs are unused in the cohort, but team a may borrow only 2.
    submit(sc, t["a"], "a2", 1)
    assert sc.wait_pending(t["a"].ns, "a2") == (
        f"couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu "
        f"in flavor {flavor}, 1 more needed"
    )
    submit(sc, t["b"], "b1", 2)
    sc.wait_admitted(t["b"].ns, "b1")


def test_a_lender_keeps_what_its_lending_limit_protects(sc):
    flavor = a100_flavor(sc)
    dept = sc.unique("dept")
    t = teams(sc, flavor, {"a": {"nominal": 4}, "b": {"nominal": 4, "lending": 1}},
              cohorts={"a": dept, "b": dept})  # fmt: skip
    submit(sc, t["a"], "a1", 5)
    sc.wait_admitted(t["a"].ns, "a1")
    submit(sc, t["a"], "a2", 1)
    assert "1 more needed" in sc.wait_pending(t["a"].ns, "a2")
    # The 3 GPUs team b does not lend stay available to team b.
    submit(sc, t["b"], "b1", 3)
    sc.wait_admitted(t["b"].ns, "b1")


def test_a_cohorts_own_quota_is_borrowed_by_its_queues(sc):
    flavor = a100_flavor(sc)
    dept = sc.unique("dept")
    sc.create(o.cohort(dept, flavors={flavor: [o.quota(4)]}))
    t = teams(sc, flavor, {"a": {"nominal": 0}}, cohorts={"a": dept})
    submit(sc, t["a"], "shared", 4)
    wl = sc.wait_admitted(t["a"].ns, "shared")
    assert wl["status"]["admission"]["podSetAssignments"][0]["flavors"] == {o.GPU: flavor}
    sc.wait(lambda: usage(sc, t["a"].cq) == ("4", "4"), "all 4 borrowed from the cohort")
    submit(sc, t["a"], "more", 1)
    assert "1 more needed" in sc.wait_pending(t["a"].ns, "more")


def test_a_cohort_lends_its_subtree_to_its_parent_only_within_its_lending_limit(sc):
    #        org (4 of its own)
    #       /        \
    #   dept-a          dept-b
    #   lends <= 2      b (0)
    #   a1 (6), a2 (2)
    flavor = a100_flavor(sc)
    org, dept_a, dept_b = sc.unique("org"), sc.unique("dept-a"), sc.unique("dept-b")
    sc.create(o.cohort(org, flavors={flavor: [o.quota(4)]}))
    sc.create(o.cohort(dept_a, org, flavors={flavor: [o.quota(0, lending=2)]}))
    sc.create(o.cohort(dept_b, org))
    t = teams(sc, flavor, {"a1": {"nominal": 6}, "a2": {"nominal": 2}, "b": {"nominal": 0}},
              cohorts={"a1": dept_a, "a2": dept_a, "b": dept_b})  # fmt: skip
    # b reaches the organisation's 4 and the 2 dept-a lends: 6, not 7.
    submit(sc, t["b"], "b6", 6)
    sc.wait_admitted(t["b"].ns, "b6")
    submit(sc, t["b"], "b1", 1)
    assert "1 more needed" in sc.wait_pending(t["b"].ns, "b1")
    # dept-a's teams keep the 6 it does not lend: a2 borrows 4 of them from a1's quota.
    submit(sc, t["a2"], "a2-6", 6)
    sc.wait_admitted(t["a2"].ns, "a2-6")
    submit(sc, t["a1"], "a1-2", 2)
    assert "2 more needed" in sc.wait_pending(t["a1"].ns, "a1-2")


def test_a_cohorts_borrowing_limit_caps_what_its_queues_take_from_above(sc):
    flavor = a100_flavor(sc)
    org, dept = sc.unique("org"), sc.unique("dept")
    sc.create(o.cohort(org, flavors={flavor: [o.quota(10)]}))
    sc.create(o.cohort(dept, org, flavors={flavor: [o.quota(0, borrowing=3)]}))
    t = teams(sc, flavor, {"a": {"nominal": 2}}, cohorts={"a": dept})
    submit(sc, t["a"], "five", 5)  # its 2 and at most 3 from the organisation
    sc.wait_admitted(t["a"].ns, "five")
    submit(sc, t["a"], "one", 1)
    assert "1 more needed" in sc.wait_pending(t["a"].ns, "one")


def test_queues_below_a_cycle_of_cohorts_admit_nothing_until_it_is_broken(sc):
    # The team's namespace is made before the cycle and the cycle broken before the namespace
    # goes: Kueue v0.19.2's controller crashes on a namespace update while a ClusterQueue sits
    # below a cycle (a nil selector in its cache's MatchingClusterQueues).
    flavor = a100_flavor(sc)
    x, y = sc.unique("x"), sc.unique("y")
    t = teams(sc, flavor, {"a": {"nominal": 4}}, cohorts={"a": x})
    sc.create(o.cohort(x, y))
    sc.create(o.cohort(y, x))
    try:
        submit(sc, t["a"], "w", 1)
        assert sc.wait_pending(t["a"].ns, "w") == f"ClusterQueue {t['a'].cq} is inactive"
        sc.holds(lambda: not sc.admitted(t["a"].ns, "w"), "nothing is admitted", 1.0)
    finally:
        sc.patch("Cohort", y, {"spec": {"parentName": None}})
    sc.wait_admitted(t["a"].ns, "w")


def test_the_lender_takes_back_what_it_lent_by_preempting_the_borrower(sc):
    flavor = a100_flavor(sc)
    dept = sc.unique("dept")
    t = teams(sc, flavor, {"a": {"nominal": 4}, "b": {"nominal": 4}},
              cohorts={"a": dept, "b": dept}, preemption=RECLAIM)  # fmt: skip
    submit(sc, t["a"], "a-own", 4)
    sc.wait_admitted(t["a"].ns, "a-own")
    sc.cluster.elapse(1.1)  # admission times have a resolution of a second
    submit(sc, t["a"], "a-borrow", 4)
    sc.wait_admitted(t["a"].ns, "a-borrow")
    sc.wait_running(t["a"].ns, "job-name=a-borrow")

    submit(sc, t["b"], "b-own", 3)
    b_wl = sc.wait_admitted(t["b"].ns, "b-own")
    victim = sc.wait(lambda: o.is_true(w := sc.workload(t["a"].ns, "a-borrow"), "Evicted") and w,
                     "the borrower evicted")  # fmt: skip
    evicted = o.condition(victim, "Evicted")
    assert (evicted["status"], evicted["reason"]) == ("True", "Preempted")
    preempted = o.condition(victim, "Preempted")
    assert preempted["reason"] == "InCohortReclamation"
    assert evicted["message"].startswith(
        f"Preempted to accommodate a workload (UID: {b_wl['metadata']['uid']}, JobUID: "
    )
    assert "due to reclamation within the cohort" in evicted["message"]
    assert (
        f"preemptor path: /{dept}/{t['b'].cq}; preemptee path: /{dept}/{t['a'].cq}"
        in (evicted["message"])
    )
    # The borrower's Job is suspended again and its pods go; a-own is untouched.
    assert sc.get("Job", "a-borrow", t["a"].ns)["spec"]["suspend"] is True
    sc.wait(lambda: not sc.pods(t["a"].ns, "job-name=a-borrow"), "the victim's pods gone")
    assert sc.admitted(t["a"].ns, "a-own")
    assert "insufficient unused quota" in sc.wait_pending(t["a"].ns, "a-borrow")
    assert reserving(sc, t["a"]) == ["a-own"]
