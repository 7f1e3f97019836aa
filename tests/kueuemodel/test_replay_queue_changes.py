"""A replay applies ClusterQueue updates at their moments, as Kueue applies a spec update: what
is admitted stays, the next cycles see the new quota (an advance reservation's lead time lowers
the lending limit, its window raises the nominal quota)."""

from __future__ import annotations

import copy

from kueuemodel.replay import ReplayJob, replay

GPU = "nvidia.com/gpu"


def _cq(name: str, nominal: int, *, lending=None, borrowing=None) -> dict:
    resource = {"name": GPU, "nominalQuota": nominal}
    if lending is not None:
        resource["lendingLimit"] = lending
    if borrowing is not None:
        resource["borrowingLimit"] = borrowing
    return {"metadata": {"name": name}, "spec": {
        "namespaceSelector": {}, "cohortName": "research",
        "resourceGroups": [{"coveredResources": [GPU],
                            "flavors": [{"name": "a100", "resources": [resource]}]}],
        "preemption": {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"},
    }}  # fmt: skip


def _lq(cq: str) -> dict:
    return {"metadata": {"name": "main", "namespace": cq}, "spec": {"clusterQueue": cq}}


def _job(key, cq, submit, gpus, runtime):
    return ReplayJob(key=key, namespace=cq, queue="main", pool="a100", resource=GPU, workers=1,
                     gpus_per_worker=gpus, priority=0, submit=submit, runtime=runtime)  # fmt: skip


def _run(changes):
    jobs = [_job("b1", "b", 0, 8, 100), _job("b2", "b", 60, 4, 100)]
    return replay(cluster_queues=[_cq("a", 8), _cq("b", 0)], local_queues=[_lq("a"), _lq("b")],
                  pools={"a100": [8, 8]}, jobs=jobs, horizon=1000,
                  queue_changes=changes)  # fmt: skip


def test_without_changes_the_borrower_takes_the_lenders_idle_quota():
    b1, b2 = _run([]).jobs
    assert b1.admitted == 0 and b2.admitted == 100  # a's 8 lent, one job at a time


def test_a_lower_lending_limit_stops_new_loans_and_a_larger_quota_is_held_for_its_team():
    holding = _cq("a", 8, lending=0)  # the lead time: 8 reserved, nothing of a's lent
    window = _cq("a", 12, lending=8)  # the window: 4 more, lent as before without them
    result = _run([(50, holding), (200, window)])
    b1, b2 = result.jobs
    assert b1.admitted == 0 and b1.ended == 100  # admitted before: it runs its course
    assert b2.admitted == 200  # no loan from 50 until the window gives a's 8 back to lend
    # In the window b may borrow a's 8 lendable, never the 4 reserved.
    greedy = replay(cluster_queues=[_cq("a", 8), _cq("b", 0)],
                    local_queues=[_lq("a"), _lq("b")], pools={"a100": [8, 8]},
                    jobs=[_job("big", "b", 210, 12, 50), _job("fits", "b", 220, 8, 50)],
                    horizon=1000, queue_changes=[(200, copy.deepcopy(window))])  # fmt: skip
    big, fits = greedy.jobs
    assert big.admitted is None and fits.admitted == 220
