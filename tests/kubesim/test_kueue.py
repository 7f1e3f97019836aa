"""Kueue behaviour in kubesim, driven through the official kubernetes client."""

from kubernetes import client

from kubesim.testing import settle_all
from tests.kubesim.kueue_helpers import (
    GPU,
    cluster_queue,
    condition,
    create,
    flavor,
    get,
    is_admitted,
    job,
    job_pods,
    kueue_setup,
    local_queue,
    patch,
    pending_message,
    priority_class,
    running_pods,
    wait_for,
    workload_for,
)


def test_job_admitted_within_quota_runs_to_completion_and_releases_quota(k8s, namespace):
    kueue_setup(k8s, namespace, quota=8)
    job(k8s, namespace, "train", workers=2, gpus=2, duration=1)

    wl = wait_for(lambda: is_admitted(k8s, namespace, "train"), message="admission")
    assert wl["metadata"]["name"].startswith("job-train-")
    assert wl["spec"]["queueName"] == "lq"
    assert wl["spec"]["podSets"][0]["count"] == 2
    assert condition(wl, "QuotaReserved")["message"] == "Quota reserved in ClusterQueue cq"
    assignment = wl["status"]["admission"]["podSetAssignments"][0]
    assert wl["status"]["admission"]["clusterQueue"] == "cq"
    assert assignment["flavors"] == {GPU: "a100"}
    assert assignment["resourceUsage"] == {GPU: "4"}

    batch = client.BatchV1Api(k8s)
    spec = batch.read_namespaced_job("train", namespace).spec
    assert spec.suspend is False
    # The flavor's node labels and tolerations were injected into the pod template.
    assert spec.template.spec.node_selector == {"accelerator": "nvidia-a100-80gb"}
    assert any(t.key == GPU for t in spec.template.spec.tolerations)

    pods = wait_for(lambda: len(running_pods(k8s, namespace, "train")) == 2 and job_pods(
        k8s, namespace, "train"), message="two running pods")  # fmt: skip
    assert {p.spec.node_name for p in pods} <= {"a100-node-0", "a100-node-1"}
    cq = wait_for(lambda: (get(k8s, "clusterqueues", "cq").get("status") or {}).get(
        "admittedWorkloads") == 1 and get(k8s, "clusterqueues", "cq"))  # fmt: skip
    assert cq["status"]["flavorsReservation"][0]["resources"][0]["total"] == "4"

    def finished():
        wl = workload_for(k8s, namespace, "train")
        cond = condition(wl, "Finished")
        return cond if cond and cond["status"] == "True" else None

    cond = wait_for(finished, message="workload finished")
    assert cond["reason"] == "Succeeded"
    done = batch.read_namespaced_job("train", namespace)
    assert done.status.succeeded == 2
    assert any(c.type == "Complete" and c.status == "True" for c in done.status.conditions)
    cq = wait_for(lambda: (get(k8s, "clusterqueues", "cq").get("status") or {}).get(
        "admittedWorkloads") == 0 and get(k8s, "clusterqueues", "cq"))  # fmt: skip
    assert cq["status"]["flavorsReservation"][0]["resources"][0]["total"] == "0"


def test_gang_is_admitted_whole_or_not_at_all(k8s, namespace):
    kueue_setup(k8s, namespace, quota=8)
    job(k8s, namespace, "small", workers=1, gpus=2)
    wait_for(lambda: is_admitted(k8s, namespace, "small"))

    job(k8s, namespace, "gang", workers=8, gpus=1)
    message = wait_for(lambda: pending_message(k8s, namespace, "gang"), message="pending reason")
    assert message == (
        "couldn't assign flavors to pod set main: insufficient unused quota for "
        "nvidia.com/gpu in flavor a100, 2 more needed"
    )
    # Nothing of the gang runs: the Job stays suspended and has no pods.
    assert client.BatchV1Api(k8s).read_namespaced_job("gang", namespace).spec.suspend is True
    assert job_pods(k8s, namespace, "gang") == []


def test_request_beyond_capacity_says_so(k8s, namespace):
    kueue_setup(k8s, namespace, quota=4)
    job(k8s, namespace, "huge", workers=1, gpus=8)
    message = wait_for(lambda: pending_message(k8s, namespace, "huge"))
    assert "current podset request (8) > maximum capacity (4)" in message


def _cohort_pair(k8s, namespace, a_kwargs, b_kwargs, quota=4):
    flavor(k8s)
    cluster_queue(k8s, "team-a", quota, cohort="dept", **a_kwargs)
    cluster_queue(k8s, "team-b", quota, cohort="dept", **b_kwargs)
    local_queue(k8s, namespace, "lq-a", "team-a")
    local_queue(k8s, namespace, "lq-b", "team-b")


def test_borrowing_up_to_borrowing_limit(k8s, namespace):
    _cohort_pair(k8s, namespace, {"borrowing": 2}, {})
    job(k8s, namespace, "a1", gpus=6, queue="lq-a")
    wait_for(lambda: is_admitted(k8s, namespace, "a1"), message="borrowing admission")
    cq = wait_for(lambda: (get(k8s, "clusterqueues", "team-a").get("status") or {}).get(
        "admittedWorkloads") == 1 and get(k8s, "clusterqueues", "team-a"))  # fmt: skip
    usage = cq["status"]["flavorsReservation"][0]["resources"][0]
    assert (usage["total"], usage["borrowed"]) == ("6", "2")

    # Two more GPUs are unused in the cohort, but team-a may borrow only 2.
    job(k8s, namespace, "a2", gpus=1, queue="lq-a")
    message = wait_for(lambda: pending_message(k8s, namespace, "a2"))
    assert "insufficient unused quota for nvidia.com/gpu in flavor a100, 1 more needed" in message
    job(k8s, namespace, "b1", gpus=2, queue="lq-b")
    wait_for(lambda: is_admitted(k8s, namespace, "b1"))


def test_lender_keeps_what_its_lending_limit_protects(k8s, namespace):
    _cohort_pair(k8s, namespace, {}, {"lending": 1})
    job(k8s, namespace, "a1", gpus=5, queue="lq-a")
    wait_for(lambda: is_admitted(k8s, namespace, "a1"))
    job(k8s, namespace, "a2", gpus=1, queue="lq-a")
    message = wait_for(lambda: pending_message(k8s, namespace, "a2"))
    assert "1 more needed" in message
    # The 3 GPUs team-b does not lend stay available to team-b.
    job(k8s, namespace, "b1", gpus=3, queue="lq-b")
    wait_for(lambda: is_admitted(k8s, namespace, "b1"))


def test_lender_reclaims_quota_by_preempting_the_borrower(k8s, namespace):
    reclaim = {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}
    _cohort_pair(k8s, namespace, {"preemption": reclaim}, {"preemption": reclaim})
    job(k8s, namespace, "a-own", gpus=4, queue="lq-a")
    wait_for(lambda: is_admitted(k8s, namespace, "a-own"))
    job(k8s, namespace, "a-borrow", gpus=4, queue="lq-a")
    wait_for(lambda: is_admitted(k8s, namespace, "a-borrow"))
    wait_for(lambda: len(running_pods(k8s, namespace, "a-borrow")) == 1)

    job(k8s, namespace, "b-own", gpus=3, queue="lq-b")
    b_wl = wait_for(lambda: is_admitted(k8s, namespace, "b-own"), message="reclaim")

    victim = workload_for(k8s, namespace, "a-borrow")
    evicted = condition(victim, "Evicted")
    assert evicted["status"] == "True" and evicted["reason"] == "Preempted"
    assert "reclamation within the cohort" in evicted["message"]
    assert b_wl["metadata"]["uid"] in evicted["message"]
    assert f"preemptor: {namespace}/{b_wl['metadata']['name']}" in evicted["message"]
    assert condition(victim, "Requeued")["status"] == "True"
    # The borrower's Job is suspended again and its pods are gone; a-own was not touched.
    batch = client.BatchV1Api(k8s)
    assert batch.read_namespaced_job("a-borrow", namespace).spec.suspend is True
    wait_for(lambda: not job_pods(k8s, namespace, "a-borrow"), message="victim pods deleted")
    assert is_admitted(k8s, namespace, "a-own")
    assert "insufficient unused quota" in wait_for(
        lambda: pending_message(k8s, namespace, "a-borrow")
    )


def test_higher_priority_preempts_lower_within_cluster_queue(k8s, namespace):
    priority_class(k8s, "low", 100)
    priority_class(k8s, "high", 1000)
    kueue_setup(k8s, namespace, quota=4, preemption={"withinClusterQueue": "LowerPriority"})
    job(k8s, namespace, "low", gpus=4, priority="low")
    low = wait_for(lambda: is_admitted(k8s, namespace, "low"))
    assert low["spec"]["priority"] == 100
    assert low["spec"]["priorityClassRef"] == {
        "group": "kueue.x-k8s.io",
        "kind": "WorkloadPriorityClass",
        "name": "low",
    }
    job(k8s, namespace, "high", gpus=4, priority="high")
    high = wait_for(lambda: is_admitted(k8s, namespace, "high"), message="preemptor admitted")
    victim = workload_for(k8s, namespace, "low")
    evicted = condition(victim, "Evicted")
    assert evicted["reason"] == "Preempted"
    assert "prioritization in the ClusterQueue" in evicted["message"]
    assert high["metadata"]["name"] in evicted["message"]
    assert condition(victim, "Preempted")["reason"] == "InClusterQueue"
    assert condition(victim, "Admitted")["status"] == "False"

    # An equal-priority newcomer does not preempt.
    job(k8s, namespace, "high-2", gpus=4, priority="high")
    wait_for(lambda: pending_message(k8s, namespace, "high-2"))
    assert is_admitted(k8s, namespace, "high")


def test_hold_stops_admission_and_releasing_resumes(k8s, namespace):
    kueue_setup(k8s, namespace, quota=8, stop="Hold")
    job(k8s, namespace, "held", gpus=1)
    message = wait_for(lambda: pending_message(k8s, namespace, "held"))
    assert "ClusterQueue cq is inactive" in message
    cq = wait_for(lambda: condition(get(k8s, "clusterqueues", "cq"), "Active"))
    assert (cq["status"], cq["reason"]) == ("False", "Stopped")

    patch(k8s, "clusterqueues", "cq", {"spec": {"stopPolicy": "None"}})
    wait_for(lambda: is_admitted(k8s, namespace, "held"), message="admission after release")


def test_local_queue_hold_and_drain_evicts_admitted_workloads(k8s, namespace):
    kueue_setup(k8s, namespace, quota=8)
    job(k8s, namespace, "running", gpus=2)
    wait_for(lambda: is_admitted(k8s, namespace, "running"))
    patch(k8s, "localqueues", "lq", {"spec": {"stopPolicy": "HoldAndDrain"}}, namespace=namespace)

    def evicted():
        cond = condition(workload_for(k8s, namespace, "running"), "Evicted")
        return cond if cond and cond["status"] == "True" else None

    assert wait_for(evicted, message="drain")["reason"] == "LocalQueueStopped"
    job(k8s, namespace, "new", gpus=1)
    assert "LocalQueue lq is inactive" in wait_for(lambda: pending_message(k8s, namespace, "new"))
    patch(k8s, "localqueues", "lq", {"spec": {"stopPolicy": "None"}}, namespace=namespace)
    wait_for(lambda: is_admitted(k8s, namespace, "running") and is_admitted(k8s, namespace, "new"))


def test_strict_fifo_head_blocks_smaller_later_workloads(k8s, namespace):
    kueue_setup(k8s, namespace, quota=4, strategy="StrictFIFO")
    job(k8s, namespace, "first", gpus=2)
    wait_for(lambda: is_admitted(k8s, namespace, "first"))
    job(k8s, namespace, "big", gpus=4)
    wait_for(lambda: pending_message(k8s, namespace, "big"))
    job(k8s, namespace, "small", gpus=1)
    wait_for(lambda: workload_for(k8s, namespace, "small"))
    settle_all()  # whatever Kueue does about it now is done
    assert not is_admitted(k8s, namespace, "small")


def test_best_effort_fifo_lets_smaller_later_workloads_through(k8s, namespace):
    kueue_setup(k8s, namespace, quota=4, strategy="BestEffortFIFO")
    job(k8s, namespace, "first", gpus=2)
    wait_for(lambda: is_admitted(k8s, namespace, "first"))
    job(k8s, namespace, "big", gpus=4)
    wait_for(lambda: pending_message(k8s, namespace, "big"))
    job(k8s, namespace, "small", gpus=1)
    wait_for(lambda: is_admitted(k8s, namespace, "small"), message="small admitted past big")
    assert not is_admitted(k8s, namespace, "big")


def test_visibility_api_lists_pending_workloads_with_positions(k8s, namespace, raw):
    priority_class(k8s, "high", 1000)
    flavor(k8s)
    cluster_queue(k8s, "cq", 1)
    local_queue(k8s, namespace, "lq", "cq")
    local_queue(k8s, namespace, "lq-other", "cq")
    job(k8s, namespace, "running", gpus=1)
    wait_for(lambda: is_admitted(k8s, namespace, "running"))
    job(k8s, namespace, "p1", gpus=1)
    job(k8s, namespace, "p2", gpus=1, queue="lq-other")
    job(k8s, namespace, "p3", gpus=1, priority="high")
    for name in ("p1", "p2", "p3"):
        wait_for(lambda n=name: pending_message(k8s, namespace, n))

    status, _, body = raw(
        "GET", "/apis/visibility.kueue.x-k8s.io/v1beta1/clusterqueues/cq/pendingworkloads"
    )
    assert status == 200
    assert body["kind"] == "PendingWorkloadsSummary"
    order = [(i["metadata"]["name"].split("-")[1], i["positionInClusterQueue"],
              i["positionInLocalQueue"], i["localQueueName"]) for i in body["items"]]  # fmt: skip
    assert order == [("p3", 0, 0, "lq"), ("p1", 1, 1, "lq"), ("p2", 2, 0, "lq-other")]
    assert body["items"][0]["priority"] == 1000

    status, _, body = raw(
        "GET",
        f"/apis/visibility.kueue.x-k8s.io/v1beta1/namespaces/{namespace}/localqueues/lq/"
        "pendingworkloads",
    )
    assert [i["positionInLocalQueue"] for i in body["items"]] == [0, 1]
    assert all(i["localQueueName"] == "lq" for i in body["items"])


def test_missing_local_queue_is_reported(k8s, namespace):
    flavor(k8s)
    job(k8s, namespace, "lost", gpus=1, queue="nope")
    assert wait_for(lambda: pending_message(k8s, namespace, "lost")) == (
        "LocalQueue nope doesn't exist"
    )


def test_admissions_survive_a_restart_from_the_state_file(tmp_path):
    from kubernetes import config

    from kubesim.testing import running_kubesim
    from tests.kubesim.conftest import CRDS_DIR, SMALL_FLEET

    state = tmp_path / "state.json"
    with running_kubesim(fleet=SMALL_FLEET, crds_dir=CRDS_DIR, state=state) as ks:
        k8s = config.new_client_from_config(ks.kubeconfig)
        client.CoreV1Api(k8s).create_namespace({"metadata": {"name": "team-a"}})
        kueue_setup(k8s, "team-a", quota=4)
        job(k8s, "team-a", "long", gpus=4, duration=600)
        wait_for(lambda: running_pods(k8s, "team-a", "long"))
        job(k8s, "team-a", "next", gpus=1)
        wait_for(lambda: pending_message(k8s, "team-a", "next"))
        pods_before = {p.metadata.name for p in job_pods(k8s, "team-a", "long")}

    with running_kubesim(fleet=SMALL_FLEET, crds_dir=CRDS_DIR, state=state) as ks:
        k8s = config.new_client_from_config(ks.kubeconfig)
        ks.controllers.run_until_idle()
        assert is_admitted(k8s, "team-a", "long")
        assert {p.metadata.name for p in running_pods(k8s, "team-a", "long")} == pods_before
        assert "1 more needed" in pending_message(k8s, "team-a", "next")
        cq = get(k8s, "clusterqueues", "cq")
        assert cq["status"]["admittedWorkloads"] == 1
        assert cq["status"]["pendingWorkloads"] == 1


def test_deleted_workload_of_a_live_job_is_recreated(k8s, namespace):
    kueue_setup(k8s, namespace, quota=4)
    job(k8s, namespace, "keep", gpus=2)
    old = wait_for(lambda: is_admitted(k8s, namespace, "keep"))
    client.CustomObjectsApi(k8s).delete_namespaced_custom_object(
        "kueue.x-k8s.io", "v1beta2", namespace, "workloads", old["metadata"]["name"]
    )

    def readmitted():
        wl = is_admitted(k8s, namespace, "keep")
        return wl if wl and wl["metadata"]["uid"] != old["metadata"]["uid"] else None

    new = wait_for(readmitted, message="a new admitted workload")
    assert new["metadata"]["name"] == old["metadata"]["name"]
    cq = wait_for(lambda: (get(k8s, "clusterqueues", "cq").get("status") or {}).get(
        "admittedWorkloads") == 1 and get(k8s, "clusterqueues", "cq"))  # fmt: skip
    assert cq["status"]["flavorsReservation"][0]["resources"][0]["total"] == "2"


def test_second_flavor_used_when_the_first_is_full(k8s, namespace):
    flavor(k8s, "a100")
    flavor(k8s, "l4", labels={"accelerator": "nvidia-l4"}, tolerations=[])
    create(
        k8s,
        "clusterqueues",
        {
            "kind": "ClusterQueue",
            "metadata": {"name": "cq"},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": [GPU, "cpu"],
                        "flavors": [
                            {"name": "a100", "resources": [
                                {"name": GPU, "nominalQuota": 2},
                                {"name": "cpu", "nominalQuota": "100"}]},
                            {"name": "l4", "resources": [
                                {"name": GPU, "nominalQuota": 8},
                                {"name": "cpu", "nominalQuota": "100"}]},
                        ],
                    }
                ],
            },
        },
    )  # fmt: skip
    local_queue(k8s, namespace, "lq", "cq")
    job(k8s, namespace, "first", gpus=2)
    first = wait_for(lambda: is_admitted(k8s, namespace, "first"))
    assert first["status"]["admission"]["podSetAssignments"][0]["flavors"][GPU] == "a100"
    job(k8s, namespace, "second", gpus=2)
    second = wait_for(lambda: is_admitted(k8s, namespace, "second"))
    assert second["status"]["admission"]["podSetAssignments"][0]["flavors"][GPU] == "l4"
    pods = wait_for(lambda: running_pods(k8s, namespace, "second"))
    assert pods[0].spec.node_name.startswith("l4-node-")


def test_queues_created_through_v1beta1_are_honoured(k8s, namespace):
    co = client.CustomObjectsApi(k8s)
    v1beta1 = ("kueue.x-k8s.io", "v1beta1")
    co.create_cluster_custom_object(*v1beta1, "resourceflavors", {
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor",
        "metadata": {"name": "a100"},
        "spec": {"nodeLabels": {"accelerator": "nvidia-a100-80gb"},
                 "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}]},
    })  # fmt: skip
    for name, quota in (("old-a", 2), ("old-b", 4)):
        co.create_cluster_custom_object(*v1beta1, "clusterqueues", {
            "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue",
            "metadata": {"name": name},
            "spec": {"cohort": "legacy", "namespaceSelector": {},
                     "resourceGroups": [{"coveredResources": [GPU], "flavors": [
                         {"name": "a100", "resources": [{"name": GPU, "nominalQuota": quota}]}]}]},
        })  # fmt: skip
    co.create_namespaced_custom_object(*v1beta1, namespace, "localqueues", {
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
        "metadata": {"name": "lq"}, "spec": {"clusterQueue": "old-a"},
    })  # fmt: skip
    job(k8s, namespace, "borrower", gpus=5)
    wl = wait_for(lambda: is_admitted(k8s, namespace, "borrower"), message="borrowing via cohort")
    assert wl["status"]["admission"]["clusterQueue"] == "old-a"
    cq = wait_for(
        lambda: (co.get_cluster_custom_object(*v1beta1, "clusterqueues", "old-a").get("status")
                 or {}).get("admittedWorkloads") == 1
        and co.get_cluster_custom_object(*v1beta1, "clusterqueues", "old-a")
    )  # fmt: skip
    assert cq["status"]["flavorsReservation"][0]["resources"][0]["borrowed"] == "3"


def test_strict_fifo_head_is_admitted_when_quota_is_released(k8s, namespace):
    kueue_setup(k8s, namespace, quota=4, strategy="StrictFIFO")
    job(k8s, namespace, "short", gpus=4, duration=1)
    wait_for(lambda: is_admitted(k8s, namespace, "short"))
    job(k8s, namespace, "waiting", gpus=4)
    assert "4 more needed" in wait_for(lambda: pending_message(k8s, namespace, "waiting"))
    wait_for(lambda: is_admitted(k8s, namespace, "waiting"), message="head admitted after release")


def test_namespace_selector_limits_who_may_use_a_cluster_queue(k8s, namespace):
    flavor(k8s)
    create(k8s, "clusterqueues", {"kind": "ClusterQueue", "metadata": {"name": "cq"}, "spec": {
        "namespaceSelector": {"matchLabels": {"team": "vision"}},
        "resourceGroups": [{"coveredResources": [GPU], "flavors": [
            {"name": "a100", "resources": [{"name": GPU, "nominalQuota": 4}]}]}]}})  # fmt: skip
    local_queue(k8s, namespace, "lq", "cq")
    job(k8s, namespace, "outsider", gpus=1)
    assert wait_for(lambda: pending_message(k8s, namespace, "outsider")) == (
        "workload namespace doesn't match ClusterQueue selector"
    )
    client.CoreV1Api(k8s).patch_namespace(namespace, {"metadata": {"labels": {"team": "vision"}}})
    wait_for(lambda: is_admitted(k8s, namespace, "outsider"), message="admitted once labelled")


def test_cluster_queue_hold_and_drain_evicts_and_requeues(k8s, namespace):
    kueue_setup(k8s, namespace, quota=4)
    job(k8s, namespace, "victim", gpus=2)
    wait_for(lambda: running_pods(k8s, namespace, "victim"))
    patch(k8s, "clusterqueues", "cq", {"spec": {"stopPolicy": "HoldAndDrain"}})

    def evicted():
        cond = condition(workload_for(k8s, namespace, "victim"), "Evicted")
        return cond if cond and cond["status"] == "True" else None

    assert wait_for(evicted)["reason"] == "ClusterQueueStopped"
    wait_for(lambda: not job_pods(k8s, namespace, "victim"), message="pods removed by the drain")
    assert client.BatchV1Api(k8s).read_namespaced_job("victim", namespace).spec.suspend is True
    patch(k8s, "clusterqueues", "cq", {"spec": {"stopPolicy": "None"}})
    wait_for(lambda: running_pods(k8s, namespace, "victim"), message="running again")


def test_cohort_own_quota_can_be_borrowed(k8s, namespace):
    flavor(k8s)
    create(k8s, "cohorts", {"kind": "Cohort", "metadata": {"name": "dept"}, "spec": {
        "resourceGroups": [{"coveredResources": [GPU], "flavors": [
            {"name": "a100", "resources": [{"name": GPU, "nominalQuota": 4}]}]}]}})  # fmt: skip
    cluster_queue(k8s, "cq", 0, cohort="dept")
    local_queue(k8s, namespace, "lq", "cq")
    job(k8s, namespace, "shared", gpus=4)
    wl = wait_for(lambda: is_admitted(k8s, namespace, "shared"), message="borrowing from cohort")
    assert wl["status"]["admission"]["podSetAssignments"][0]["flavors"] == {GPU: "a100"}
    job(k8s, namespace, "more", gpus=1)
    assert "1 more needed" in wait_for(lambda: pending_message(k8s, namespace, "more"))


def test_a_workload_requesting_a_resource_its_cluster_queue_does_not_cover_stays_pending(
    k8s, namespace
):
    # The queue covers GPUs only; the job also asks for CPU, which Kueue has no quota for.
    kueue_setup(k8s, namespace, 8)
    body = {
        "metadata": {"name": "needs-cpu", "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
        "spec": {"suspend": True, "template": {"spec": {"restartPolicy": "Never", "containers": [
            {"name": "train", "image": "registry.example/train:1",
             "resources": {"requests": {"cpu": "4"}, "limits": {GPU: "1"}}}]}}},
    }  # fmt: skip
    client.BatchV1Api(k8s).create_namespaced_job(namespace, body)
    message = wait_for(lambda: pending_message(k8s, namespace, "needs-cpu"), message="pending")
    assert message == (
        "couldn't assign flavors to pod set main: resource cpu unavailable in ClusterQueue"
    )
    assert not is_admitted(k8s, namespace, "needs-cpu")
