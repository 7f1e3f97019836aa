"""Volcano in kubesim: PodGroups, gang admission against queue capability, job phases."""

from kubernetes import client

from tests.kubesim.kueue_helpers import GPU, GPU_TOLERATION, wait_for

BATCH = ("batch.volcano.sh", "v1alpha1")
SCHED = ("scheduling.volcano.sh", "v1beta1")


def _queue(k8s, name, capability=None, parent=None):
    spec = {"weight": 1, "reclaimable": True}
    if capability is not None:
        spec["capability"] = {GPU: str(capability)}
    if parent:
        spec["parent"] = parent
    body = {"apiVersion": "/".join(SCHED), "kind": "Queue", "metadata": {"name": name},
            "spec": spec}  # fmt: skip
    return client.CustomObjectsApi(k8s).create_cluster_custom_object(*SCHED, "queues", body)


def _vcjob(k8s, namespace, name, *, queue, workers=2, gpus=1, duration=60, exit_code=0,
           policies=None, max_retry=None, priority_class=None):  # fmt: skip
    annotations = {
        "kubesim.dev/duration-seconds": str(duration),
        "kubesim.dev/exit-code": str(exit_code),
    }
    body = {
        "apiVersion": "/".join(BATCH),
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "schedulerName": "volcano",
            "queue": queue,
            "minAvailable": workers,
            "plugins": {"svc": [], "env": []},
            "policies": policies or [{"event": "PodEvicted", "action": "RestartJob"}],
            "tasks": [
                {
                    "name": "worker",
                    "replicas": workers,
                    "template": {
                        "metadata": {"annotations": annotations},
                        "spec": {
                            "restartPolicy": "Never",
                            "tolerations": [GPU_TOLERATION],
                            "containers": [
                                {
                                    "name": "train",
                                    "image": "x",
                                    "resources": {"limits": {GPU: str(gpus)}},
                                }
                            ],
                        },
                    },
                }
            ],
        },
    }
    if max_retry is not None:
        body["spec"]["maxRetry"] = max_retry
    if priority_class:
        body["spec"]["priorityClassName"] = priority_class
    co = client.CustomObjectsApi(k8s)
    return co.create_namespaced_custom_object(*BATCH, namespace, "jobs", body)


def _phase(k8s, namespace, name):
    job = client.CustomObjectsApi(k8s).get_namespaced_custom_object(*BATCH, namespace, "jobs", name)
    return ((job.get("status") or {}).get("state") or {}).get("phase")


def _podgroup(k8s, namespace, job_name):
    items = client.CustomObjectsApi(k8s).list_namespaced_custom_object(
        *SCHED, namespace, "podgroups"
    )["items"]
    return next((pg for pg in items if pg["metadata"]["name"].startswith(f"{job_name}-")), None)


def _pods(k8s, namespace, job_name):
    return (
        client.CoreV1Api(k8s)
        .list_namespaced_pod(namespace, label_selector=f"volcano.sh/job-name={job_name}")
        .items
    )


def test_default_queues_exist(k8s):
    co = client.CustomObjectsApi(k8s)
    names = {
        q["metadata"]["name"] for q in co.list_cluster_custom_object(*SCHED, "queues")["items"]
    }
    assert {"root", "default"} <= names


def test_gang_admission_against_queue_capability(k8s, namespace):
    _queue(k8s, "team", capability=4)
    _vcjob(k8s, namespace, "first", queue="team", workers=2, gpus=2, duration=1)
    wait_for(lambda: _phase(k8s, namespace, "first") == "Running", message="first running")
    pg = _podgroup(k8s, namespace, "first")
    assert pg["spec"]["minMember"] == 2
    assert pg["spec"]["minResources"] == {GPU: "4"}
    assert pg["spec"]["queue"] == "team"
    assert pg["status"]["phase"] == "Running"
    pods = _pods(k8s, namespace, "first")
    assert sorted(p.metadata.name for p in pods) == ["first-worker-0", "first-worker-1"]
    env = {e.name: e.value for e in pods[0].spec.containers[0].env}
    assert env["VC_WORKER_HOSTS"] == "first-worker-0.first,first-worker-1.first"
    assert env["VK_TASK_INDEX"] == pods[0].metadata.name[-1]
    assert pods[0].spec.hostname == pods[0].metadata.name and pods[0].spec.subdomain == "first"

    # The queue is full: the second gang waits as a whole, without pods.
    _vcjob(k8s, namespace, "second", queue="team", workers=2, gpus=1, duration=1)

    def blocked():
        pg = _podgroup(k8s, namespace, "second")
        conds = (pg or {}).get("status", {}).get("conditions") or []
        return next((c for c in conds if c["type"] == "Unschedulable"), None)

    cond = wait_for(blocked, message="second podgroup blocked by capability")
    assert "queue resource quota insufficient" in cond["message"]
    assert _podgroup(k8s, namespace, "second")["status"]["phase"] == "Pending"
    assert _pods(k8s, namespace, "second") == []
    assert _phase(k8s, namespace, "second") == "Pending"

    wait_for(lambda: _phase(k8s, namespace, "first") == "Completed", message="first completed")
    wait_for(lambda: _phase(k8s, namespace, "second") in ("Running", "Completed"))
    wait_for(lambda: _phase(k8s, namespace, "second") == "Completed", message="second done")
    job = client.CustomObjectsApi(k8s).get_namespaced_custom_object(
        *BATCH, namespace, "jobs", "second"
    )
    assert job["status"]["succeeded"] == 2 and job["status"]["minAvailable"] == 2


def test_parent_queue_capability_applies_to_children(k8s, namespace):
    _queue(k8s, "dept", capability=4)
    _queue(k8s, "child-a", capability=4, parent="dept")
    _queue(k8s, "child-b", capability=4, parent="dept")
    _vcjob(k8s, namespace, "a", queue="child-a", workers=1, gpus=3)
    wait_for(lambda: _phase(k8s, namespace, "a") == "Running")
    _vcjob(k8s, namespace, "b", queue="child-b", workers=1, gpus=2)

    def blocked():
        pg = _podgroup(k8s, namespace, "b")
        conds = (pg or {}).get("status", {}).get("conditions") or []
        return next((c["message"] for c in conds if c["type"] == "Unschedulable"), None)

    assert "queue dept" in wait_for(blocked)
    queue = wait_for(
        lambda: (
            client.CustomObjectsApi(k8s)
            .get_cluster_custom_object(*SCHED, "queues", "child-a")
            .get("status", {})
            .get("allocated")
        )
    )
    assert queue == {GPU: "3"}


def test_closed_queue_admits_nothing(k8s, namespace):
    _queue(k8s, "closing")
    co = client.CustomObjectsApi(k8s)
    co.patch_cluster_custom_object_status(
        *SCHED, "queues", "closing", {"status": {"state": "Closed"}}
    )
    _vcjob(k8s, namespace, "late", queue="closing", workers=1)

    def blocked():
        pg = _podgroup(k8s, namespace, "late")
        conds = (pg or {}).get("status", {}).get("conditions") or []
        return next((c["message"] for c in conds if c["type"] == "Unschedulable"), None)

    assert wait_for(blocked) == "queue closing is closed"
    assert _pods(k8s, namespace, "late") == []


def test_failed_workers_fail_the_job(k8s, namespace):
    _vcjob(k8s, namespace, "broken", queue="default", workers=2, duration=0.3, exit_code=1)
    wait_for(lambda: _phase(k8s, namespace, "broken") == "Failed", message="job failed")
    pg = _podgroup(k8s, namespace, "broken")
    assert pg["status"]["phase"] == "Completed"


def test_pod_failure_policies_terminate_or_restart_the_gang(k8s, namespace):
    terminate = [{"event": "PodFailed", "action": "TerminateJob"}]
    _vcjob(k8s, namespace, "stop", queue="default", duration=0.3, exit_code=2, policies=terminate)
    wait_for(lambda: _phase(k8s, namespace, "stop") == "Terminated", message="terminated")

    restart = [{"event": "PodFailed", "action": "RestartJob"}]
    _vcjob(k8s, namespace, "retry", queue="default", duration=0.3, exit_code=1,
           policies=restart, max_retry=2)  # fmt: skip
    wait_for(lambda: _phase(k8s, namespace, "retry") == "Failed", message="retries used up")
    job = client.CustomObjectsApi(k8s).get_namespaced_custom_object(
        *BATCH, namespace, "jobs", "retry"
    )
    assert job["status"]["retryCount"] == 2
    phases = [c["status"] for c in job["status"]["conditions"]]
    assert phases.count("Restarting") == 2


def test_a_full_queue_enqueues_the_higher_priority_job_first(k8s, namespace):
    """Volcano's order within a queue: priority first, then creation time. Three gangs wait
    behind a full queue (capability 2): when it frees, the high-priority one goes first
    although it came last (and its name sorts last)."""
    sched = client.SchedulingV1Api(k8s)
    for name, value in (("vq-high", 1000), ("vq-low", 10)):
        sched.create_priority_class(
            client.V1PriorityClass(metadata=client.V1ObjectMeta(name=name), value=value)
        )
    try:
        _queue(k8s, "ordered", capability=2)
        _vcjob(k8s, namespace, "holder", queue="ordered", workers=1, gpus=2, duration=5)
        wait_for(lambda: _phase(k8s, namespace, "holder") == "Running", message="holder runs")
        for name, pc in (("low-a", "vq-low"), ("low-b", "vq-low"), ("urgent", "vq-high")):
            _vcjob(k8s, namespace, name, queue="ordered", workers=1, gpus=2, duration=5,
                   priority_class=pc)  # fmt: skip
            wait_for(lambda n=name: _podgroup(k8s, namespace, n), message=f"{name} podgroup")
        assert _phase(k8s, namespace, "urgent") == "Pending"
        wait_for(lambda: _phase(k8s, namespace, "urgent") == "Running", message="urgent runs first")
        assert _phase(k8s, namespace, "low-a") == _phase(k8s, namespace, "low-b") == "Pending"
    finally:
        for name in ("vq-high", "vq-low"):
            sched.delete_priority_class(name)
