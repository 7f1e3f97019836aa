"""The order of pending workloads: the visibility API's positions (priority, then age, per
ClusterQueue and per LocalQueue), and admission fair sharing, where the LocalQueues of a
ClusterQueue with `admissionScope.admissionMode: UsageBasedAdmissionFairSharing` are served in
the order of their usage, an admission counting at once as an entry penalty (Kueue's
"Pending Workloads" and "Admission Fair Sharing" pages)."""

from __future__ import annotations

from tests.scenarios import objects as o
from tests.scenarios.kueue_world import a100_flavor, submit, teams


def _owner(item: dict) -> str:
    return item["metadata"]["ownerReferences"][0]["name"]


def test_the_visibility_api_lists_pending_workloads_with_their_positions(sc):
    high = sc.unique("high")
    sc.create(o.priority_class(high, 1000))
    flavor = a100_flavor(sc)
    t = teams(sc, flavor, {"a": {"nominal": 1}})["a"]
    sc.create(o.local_queue("other", t.cq), t.ns)
    submit(sc, t, "running", 1)
    sc.wait_admitted(t.ns, "running")
    submit(sc, t, "p1", 1)
    sc.cluster.elapse(1.1)  # creation times have a resolution of a second
    sc.create(o.job("p2", "other", {o.GPU: 1}, annotations=sc.cluster.runs(600)), t.ns)
    submit(sc, t, "p3", 1, priority=high)

    def listed():
        items = sc.pending_workloads(cq=t.cq)["items"]
        return items if len(items) == 3 else None

    items = sc.wait(listed, "three pending workloads")
    summary = sc.pending_workloads(cq=t.cq)
    assert summary["kind"] == "PendingWorkloadsSummary"
    order = [(_owner(i), i["positionInClusterQueue"], i["positionInLocalQueue"],
              i["localQueueName"]) for i in items]  # fmt: skip
    assert order == [("p3", 0, 0, "lq"), ("p1", 1, 1, "lq"), ("p2", 2, 0, "other")]
    assert items[0]["priority"] == 1000
    assert items[0]["metadata"]["namespace"] == t.ns
    local = sc.pending_workloads(ns=t.ns, lq="lq")["items"]
    assert [(_owner(i), i["positionInLocalQueue"]) for i in local] == [("p3", 0), ("p1", 1)]


def test_admission_fair_sharing_serves_the_local_queue_that_used_less_first(sc):
    # Both LocalQueues start unused; a's admission counts against it at once (the entry
    # penalty), so b's later job of a lower priority goes before a's next one.
    high = sc.unique("high")
    sc.create(o.priority_class(high, 100))
    flavor = a100_flavor(sc)
    t = teams(sc, flavor, {"a": {"nominal": 8}}, admission_fair_sharing=True)["a"]
    sc.create(o.local_queue("lq-b", t.cq), t.ns)
    submit(sc, t, "a-big", 8, seconds=4)
    sc.wait_admitted(t.ns, "a-big")
    submit(sc, t, "a-next", 8, priority=high)
    sc.create(o.job("b-next", "lq-b", {o.GPU: 8}, annotations=sc.cluster.runs(600)), t.ns)

    def order():
        items = sc.pending_workloads(cq=t.cq)["items"]
        ranked = sorted(items, key=lambda i: i["positionInClusterQueue"])
        return [i["localQueueName"] for i in ranked] if len(ranked) == 2 else None

    assert sc.wait(order, "two pending workloads") == ["lq-b", "lq"]
    # When a-big ends, b's job is admitted, not a's older one of a higher priority.
    sc.wait_admitted(t.ns, "b-next")
    assert not sc.admitted(t.ns, "a-next")


def test_without_admission_fair_sharing_priority_decides(sc):
    high = sc.unique("high")
    sc.create(o.priority_class(high, 100))
    flavor = a100_flavor(sc)
    t = teams(sc, flavor, {"a": {"nominal": 8}})["a"]
    sc.create(o.local_queue("lq-b", t.cq), t.ns)
    submit(sc, t, "a-big", 8, seconds=4)
    sc.wait_admitted(t.ns, "a-big")
    submit(sc, t, "a-next", 8, priority=high)
    sc.create(o.job("b-next", "lq-b", {o.GPU: 8}, annotations=sc.cluster.runs(600)), t.ns)
    sc.wait_admitted(t.ns, "a-next")
    assert not sc.admitted(t.ns, "b-next")


def test_a_local_queues_weight_divides_its_usage(sc):
    # Two LocalQueues, each with one admission counted against it; b weighted 2 counts half and
    # goes first although a asked first.
    flavor = a100_flavor(sc)
    t = teams(sc, flavor, {"a": {"nominal": 8}}, admission_fair_sharing=True)["a"]
    sc.create(o.local_queue("lq-b", t.cq, weight="2"), t.ns)
    submit(sc, t, "a0", 4, seconds=4)
    sc.create(o.job("b0", "lq-b", {o.GPU: 4}, annotations=sc.cluster.runs(4)), t.ns)
    sc.wait_admitted(t.ns, "a0")
    sc.wait_admitted(t.ns, "b0")
    submit(sc, t, "a1", 8)
    sc.create(o.job("b1", "lq-b", {o.GPU: 8}, annotations=sc.cluster.runs(600)), t.ns)

    def order():
        items = sc.pending_workloads(cq=t.cq)["items"]
        ranked = sorted(items, key=lambda i: i["positionInClusterQueue"])
        return [i["localQueueName"] for i in ranked] if len(ranked) == 2 else None

    assert sc.wait(order, "two pending workloads") == ["lq-b", "lq"]
    sc.wait_admitted(t.ns, "b1")
    assert not sc.admitted(t.ns, "a1")
