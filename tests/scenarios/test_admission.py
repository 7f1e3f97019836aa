"""Kueue's admission of batch Jobs: quota per flavor, all or nothing, the messages of a Workload
that waits, flavors tried in order, the namespace selector, stop policies, queueing strategies,
and the Workload's conditions and events (Kueue's concept pages "Cluster Queue", "Local Queue",
"Workload" and its e2e and integration tests of the Job integration)."""

from __future__ import annotations

import time

import pytest

from tests.scenarios import objects as o
from tests.scenarios.objects import GPU, GPU_TOLERATION, POOL_LABEL


def _a100_team(sc, gpus, **kw):
    return sc.team("a100", gpus, tolerations=[GPU_TOLERATION], **kw)


def test_a_job_within_quota_is_admitted_runs_and_gives_its_quota_back(sc, cluster):
    ns, cq, flavor = _a100_team(sc, 8)
    sc.create(o.job("train", "lq", {GPU: 2}, workers=2, annotations=cluster.runs(2)), ns)

    wl = sc.wait_admitted(ns, "train")
    assert wl["metadata"]["name"].startswith("job-train-")
    assert wl["spec"]["queueName"] == "lq"
    assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("main", 2)]
    assert o.condition(wl, "QuotaReserved")["message"] == f"Quota reserved in ClusterQueue {cq}"
    assert wl["status"]["admission"]["clusterQueue"] == cq
    (assignment,) = wl["status"]["admission"]["podSetAssignments"]
    assert assignment["flavors"] == {GPU: flavor}
    assert assignment["resourceUsage"] == {GPU: "4"}
    assert assignment["count"] == 2

    job = sc.wait(lambda: (j := sc.get("Job", "train", ns))["spec"]["suspend"] is False and j,
                  "the Job started")  # fmt: skip
    # The flavor's node labels and tolerations are put into the pod template.
    template = job["spec"]["template"]["spec"]
    assert template["nodeSelector"] == {POOL_LABEL: "a100"}
    assert GPU_TOLERATION in template["tolerations"]
    pods = sc.wait_running(ns, "job-name=train", 2)
    assert {p.spec.node_name.rsplit("-node-", 1)[0] for p in pods} == {"a100"}
    sc.wait(lambda: sc.cq_status(cq).get("admittedWorkloads") == 1, "the ClusterQueue counts it")
    usage = sc.cq_status(cq)["flavorsReservation"][0]["resources"][0]
    assert (usage["name"], usage["total"]) == (GPU, "4")

    finished = sc.wait(lambda: o.is_true(w := sc.workload(ns, "train"), "Finished") and w,
                       "the Workload finished")  # fmt: skip
    assert o.condition(finished, "Finished")["reason"] == "Succeeded"
    done = sc.get("Job", "train", ns)
    assert done["status"]["succeeded"] == 2
    assert o.is_true(done, "Complete")
    sc.wait(lambda: sc.cq_status(cq).get("admittedWorkloads") == 0, "the quota given back")
    usage = sc.cq_status(cq)["flavorsReservation"][0]["resources"][0]
    assert usage["total"] == "0"


def test_a_gang_is_admitted_whole_or_not_at_all(sc, cluster):
    ns, _, flavor = _a100_team(sc, 8)
    sc.create(o.job("small", "lq", {GPU: 2}, annotations=cluster.runs(600)), ns)
    sc.wait_admitted(ns, "small")
    sc.create(o.job("gang", "lq", {GPU: 1}, workers=8, annotations=cluster.runs(600)), ns)
    assert sc.wait_pending(ns, "gang") == (
        f"couldn't assign flavors to pod set main: insufficient unused quota for "
        f"nvidia.com/gpu in flavor {flavor}, 2 more needed"
    )
    # Nothing of the gang runs: the Job stays suspended and has no pods.
    assert sc.get("Job", "gang", ns)["spec"]["suspend"] is True
    assert sc.pods(ns, "job-name=gang") == []


def test_a_request_beyond_the_queues_quota_says_so(sc, cluster):
    ns, _, flavor = _a100_team(sc, 4)
    sc.create(o.job("huge", "lq", {GPU: 8}, annotations=cluster.runs(60)), ns)
    assert sc.wait_pending(ns, "huge") == (
        f"couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in "
        f"flavor {flavor}, previously considered podsets requests (0) + current podset request "
        f"(8) > maximum capacity (4)"
    )


def test_a_missing_local_queue_is_reported(sc, cluster):
    ns = sc.namespace()
    sc.create(o.job("lost", "nope", {GPU: 1}, annotations=cluster.runs(60)), ns)
    assert sc.wait_pending(ns, "lost") == "LocalQueue nope doesn't exist"


def test_the_namespace_selector_limits_who_may_use_a_cluster_queue(sc, cluster):
    ns = sc.namespace()
    flavor, cq = sc.unique("l4"), sc.unique("cq")
    team = sc.unique("vision")
    sc.create(o.flavor(flavor, "l4"))
    sc.create(o.cluster_queue(cq, {flavor: [o.quota(4)]},
                              selector={"matchLabels": {"team": team}}))  # fmt: skip
    sc.create(o.local_queue("lq", cq), ns)
    sc.create(o.job("outsider", "lq", {GPU: 1}, annotations=cluster.runs(60)), ns)
    assert sc.wait_pending(ns, "outsider") == (
        "workload namespace doesn't match ClusterQueue selector"
    )
    sc.core.patch_namespace(ns, {"metadata": {"labels": {"team": team}}})
    sc.wait_admitted(ns, "outsider")


def test_the_second_flavor_is_used_when_the_first_is_full(sc, cluster):
    ns = sc.namespace()
    a100, l4, cq = sc.unique("a100"), sc.unique("l4"), sc.unique("cq")
    sc.create(o.flavor(a100, "a100", tolerations=[GPU_TOLERATION]))
    sc.create(o.flavor(l4, "l4"))
    sc.create(o.cluster_queue(cq, {a100: [o.quota(2)], l4: [o.quota(8)]}, namespaces=[ns]))
    sc.create(o.local_queue("lq", cq), ns)
    sc.create(o.job("first", "lq", {GPU: 2}, annotations=cluster.runs(600)), ns)
    first = sc.wait_admitted(ns, "first")
    assert first["status"]["admission"]["podSetAssignments"][0]["flavors"][GPU] == a100
    sc.create(o.job("second", "lq", {GPU: 2}, annotations=cluster.runs(600)), ns)
    second = sc.wait_admitted(ns, "second")
    assert second["status"]["admission"]["podSetAssignments"][0]["flavors"][GPU] == l4
    (pod,) = sc.wait_running(ns, "job-name=second")
    assert pod.spec.node_name.startswith("l4-node-")


def test_a_resource_the_cluster_queue_does_not_cover_keeps_the_workload_pending(sc, cluster):
    ns, _, _ = sc.team("l4", 4)
    body = o.job("needs-cpu", "lq", {GPU: 1}, annotations=cluster.runs(60))
    body["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "4"}
    sc.create(body, ns)
    assert sc.wait_pending(ns, "needs-cpu") == (
        "couldn't assign flavors to pod set main: resource cpu unavailable in ClusterQueue"
    )


@pytest.mark.parametrize("scope", ["ClusterQueue", "LocalQueue"])
def test_hold_stops_admission_and_releasing_it_resumes(sc, cluster, scope):
    ns, cq, _ = sc.team("l4", 4)
    kind, name, where = ("ClusterQueue", cq, None) if scope == "ClusterQueue" else (
        "LocalQueue", "lq", ns)  # fmt: skip
    sc.patch(kind, name, {"spec": {"stopPolicy": "Hold"}}, where)
    sc.create(o.job("held", "lq", {GPU: 1}, annotations=cluster.runs(60)), ns)
    stopped = f"ClusterQueue {cq}" if scope == "ClusterQueue" else "LocalQueue lq"
    assert sc.wait_pending(ns, "held") == f"{stopped} is inactive"
    if scope == "ClusterQueue":
        active = sc.wait(lambda: (c := o.condition(sc.get("ClusterQueue", cq), "Active"))
                         and c["status"] == "False" and c, "the ClusterQueue inactive")  # fmt: skip
        assert active["reason"] == "Stopped"
    sc.patch(kind, name, {"spec": {"stopPolicy": "None"}}, where)
    sc.wait_admitted(ns, "held")


@pytest.mark.parametrize("scope", ["ClusterQueue", "LocalQueue"])
def test_hold_and_drain_evicts_what_runs_and_it_runs_again_when_released(sc, cluster, scope):
    ns, cq, _ = sc.team("l4", 4)
    kind, name, where = ("ClusterQueue", cq, None) if scope == "ClusterQueue" else (
        "LocalQueue", "lq", ns)  # fmt: skip
    sc.create(o.job("victim", "lq", {GPU: 2}, annotations=cluster.runs(600)), ns)
    sc.wait_running(ns, "job-name=victim")
    sc.patch(kind, name, {"spec": {"stopPolicy": "HoldAndDrain"}}, where)
    evicted = sc.wait(lambda: (c := o.condition(sc.workload(ns, "victim"), "Evicted"))
                      and c["status"] == "True" and c, "the Workload evicted")  # fmt: skip
    assert evicted["reason"] == f"{scope}Stopped"
    sc.wait(lambda: not sc.pods(ns, "job-name=victim"), "the drained pods gone")
    assert sc.get("Job", "victim", ns)["spec"]["suspend"] is True
    sc.patch(kind, name, {"spec": {"stopPolicy": "None"}}, where)
    sc.wait_running(ns, "job-name=victim")


def test_strict_fifo_keeps_smaller_later_workloads_behind_its_head(sc, cluster):
    ns, _, _ = sc.team("l4", 4, strategy="StrictFIFO")
    # The first job runs until it is deleted, so the head waits for as long as it takes.
    sc.create(o.job("first", "lq", {GPU: 2}, annotations=cluster.runs(600)), ns)
    sc.wait_admitted(ns, "first")
    sc.create(o.job("big", "lq", {GPU: 4}, annotations=cluster.runs(600)), ns)
    assert "2 more needed" in sc.wait_pending(ns, "big")
    # Kueue orders a queue by creation time, which Kubernetes keeps to the second: the small job
    # is created a second later, so that it is the younger one on both clusters.
    time.sleep(1.1)
    sc.create(o.job("small", "lq", {GPU: 1}, annotations=cluster.runs(600)), ns)
    sc.wait(lambda: sc.workload(ns, "small"), "the small job's Workload")
    sc.holds(lambda: not sc.admitted(ns, "small"), "the small job waits behind the head", 1.0)
    # When the first job's quota is given back, the head goes first.
    sc.delete("Job", "first", ns)
    sc.wait_admitted(ns, "big")
    assert not sc.admitted(ns, "small")


def test_best_effort_fifo_lets_smaller_later_workloads_past_a_head_that_does_not_fit(sc, cluster):
    ns, _, _ = sc.team("l4", 4, strategy="BestEffortFIFO")
    sc.create(o.job("first", "lq", {GPU: 2}, annotations=cluster.runs(600)), ns)
    sc.wait_admitted(ns, "first")
    sc.create(o.job("big", "lq", {GPU: 4}, annotations=cluster.runs(600)), ns)
    sc.wait_pending(ns, "big")
    sc.create(o.job("small", "lq", {GPU: 1}, annotations=cluster.runs(600)), ns)
    sc.wait_admitted(ns, "small")
    assert not sc.admitted(ns, "big")


def test_a_deleted_workload_of_a_live_job_is_made_again(sc, cluster):
    ns, cq, _ = sc.team("l4", 4)
    sc.create(o.job("keep", "lq", {GPU: 2}, annotations=cluster.runs(600)), ns)
    old = sc.wait_admitted(ns, "keep")
    sc.delete("Workload", old["metadata"]["name"], ns)

    def again():
        wl = sc.admitted(ns, "keep")
        return wl if wl and wl["metadata"]["uid"] != old["metadata"]["uid"] else None

    new = sc.wait(again, "a new admitted Workload")
    assert new["metadata"]["name"] == old["metadata"]["name"]
    sc.wait(lambda: sc.cq_status(cq).get("admittedWorkloads") == 1, "one admitted workload")
    usage = sc.cq_status(cq)["flavorsReservation"][0]["resources"][0]
    assert usage["total"] == "2"


def test_a_workload_says_what_happened_in_conditions_and_events(sc, cluster):
    ns, cq, flavor = sc.team("l4", 2)
    sc.create(o.job("first", "lq", {GPU: 2}, annotations=cluster.runs(2)), ns)
    sc.create(o.job("second", "lq", {GPU: 2}, annotations=cluster.runs(1)), ns)
    sc.wait_admitted(ns, "first")
    waiting = sc.wait_pending(ns, "second")
    assert f"insufficient unused quota for nvidia.com/gpu in flavor {flavor}" in waiting
    first = sc.workload(ns, "first")
    second_name = sc.workload(ns, "second")["metadata"]["name"]
    statuses = {k: c["status"] for k, c in o.conditions(first).items()}
    assert {"QuotaReserved": "True", "Admitted": "True"}.items() <= statuses.items()
    assert o.condition(first, "Admitted")["reason"] == "Admitted"
    assert o.condition(first, "QuotaReserved")["reason"] == "QuotaReserved"
    pending = o.condition(sc.workload(ns, "second"), "QuotaReserved")
    assert (pending["status"], pending["reason"]) == ("False", "Pending")
    # When the first ends, the second is admitted; both finish.
    sc.wait(lambda: o.is_true(sc.workload(ns, "second"), "Finished"), "the second finished")
    reasons = sc.wait(
        lambda: (
            (r := {e.reason for e in sc.events(ns, second_name)})
            >= {"Pending", "QuotaReserved", "Admitted"}
            and r
        ),
        "the second Workload's events",
    )
    assert reasons >= {"Pending", "QuotaReserved", "Admitted"}
    (reserved,) = [e for e in sc.events(ns, second_name) if e.reason == "QuotaReserved"]
    assert reserved.message.startswith(f"Quota reserved in ClusterQueue {cq}, wait time since "
                                       "queued was ")  # fmt: skip
    (admitted,) = [e for e in sc.events(ns, second_name) if e.reason == "Admitted"]
    assert admitted.message == (
        f"Admitted by ClusterQueue {cq}, wait time since reservation was 0s"
    )
    job_events = {e.reason for e in sc.events(ns, "second") if e.involved_object.kind == "Job"}
    assert {"CreatedWorkload", "Started"} <= job_events
