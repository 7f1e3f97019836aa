"""PyTorchJob and JobSet in kubesim: Kueue admits each whole (one pod set per replica type or
replicated job), their controllers run them as the training operator and JobSet do, and quota
is released when they finish."""

from kubernetes import client

from tests.kubesim.kueue_helpers import (
    GPU,
    GPU_TOLERATION,
    condition,
    get,
    kueue_setup,
    pending_message,
    wait_for,
)

KUBEFLOW = ("kubeflow.org", "v1")
JOBSET = ("jobset.x-k8s.io", "v1alpha2")


def _container(gpus, name="pytorch"):
    return {"name": name, "image": "registry.example/train:1",
            "resources": {"limits": {GPU: str(gpus)}}}  # fmt: skip


def _template(gpus, duration, name="pytorch", exit_code=None):
    annotations = {"kubesim.dev/duration-seconds": str(duration)}
    if exit_code is not None:
        annotations["kubesim.dev/exit-code"] = str(exit_code)
    spec = {"containers": [_container(gpus, name)], "tolerations": [GPU_TOLERATION]}
    return {"metadata": {"annotations": annotations}, "spec": spec}


def pytorchjob(k8s, ns, name, *, workers, gpus, duration=1, backoff=0, exit_code=None):
    body = {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
        "spec": {
            "runPolicy": {"suspend": True, "backoffLimit": backoff, "cleanPodPolicy": "Running"},
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "Never",
                           "template": _template(gpus, duration)},
                "Worker": {"replicas": workers, "restartPolicy": "Never",
                           "template": _template(gpus, duration, exit_code=exit_code)},
            },
        },
    }  # fmt: skip
    return client.CustomObjectsApi(k8s).create_namespaced_custom_object(
        *KUBEFLOW, ns, "pytorchjobs", body
    )


def jobset(k8s, ns, name, *, workers, gpus, duration=1, max_restarts=0, exit_code=None):
    def rj(rj_name, replicas, g, d, code=None):
        return {"name": rj_name, "replicas": replicas, "template": {"spec": {
            "parallelism": 1, "completions": 1, "backoffLimit": 0,
            "template": {**_template(g, d, "main", code),
                         "spec": {**_template(g, d, "main", code)["spec"],
                                  "restartPolicy": "Never"}}}}}  # fmt: skip

    body = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
        "spec": {
            "suspend": True,
            "replicatedJobs": [rj("driver", 1, 0, duration),
                               rj("workers", workers, gpus, duration, exit_code)],
            "successPolicy": {"operator": "All", "targetReplicatedJobs": ["driver"]},
            "failurePolicy": {"maxRestarts": max_restarts},
        },
    }  # fmt: skip
    return client.CustomObjectsApi(k8s).create_namespaced_custom_object(
        *JOBSET, ns, "jobsets", body
    )


def _obj(k8s, group, ns, plural, name):
    return client.CustomObjectsApi(k8s).get_namespaced_custom_object(*group, ns, plural, name)


def _workload(k8s, ns, kind, name):
    items = client.CustomObjectsApi(k8s).list_namespaced_custom_object(
        "kueue.x-k8s.io", "v1beta2", ns, "workloads"
    )["items"]
    for wl in items:
        if any(r["kind"] == kind and r["name"] == name for r in wl["metadata"]["ownerReferences"]):
            return wl
    return None


def _true(obj, ctype):
    cond = condition(obj, ctype)
    return cond if cond and cond["status"] == "True" else None


def _pods(k8s, ns, selector):
    return client.CoreV1Api(k8s).list_namespaced_pod(ns, label_selector=selector).items


def test_a_pytorchjob_is_admitted_whole_and_runs_with_torchruns_environment(k8s, namespace):
    kueue_setup(k8s, namespace, quota=8)
    pytorchjob(k8s, namespace, "ddp", workers=3, gpus=2, duration=2)
    wl = wait_for(lambda: (w := _workload(k8s, namespace, "PyTorchJob", "ddp")) and _true(
        w, "Admitted") and w, message="admission")  # fmt: skip
    assert wl["metadata"]["name"].startswith("pytorchjob-ddp-")
    podsets = [(p["name"], p["count"]) for p in wl["spec"]["podSets"]]
    assert podsets == [("master", 1), ("worker", 3)]
    usage = {a["name"]: a["resourceUsage"][GPU] for a in
             wl["status"]["admission"]["podSetAssignments"]}  # fmt: skip
    assert usage == {"master": "2", "worker": "6"}
    pods = wait_for(lambda: len(p := _pods(k8s, namespace, "training.kubeflow.org/job-name=ddp"))
                    == 4 and p, message="four pods")  # fmt: skip
    env = {p.metadata.name: {e.name: e.value for e in p.spec.containers[0].env} for p in pods}
    assert env["ddp-master-0"]["RANK"] == "0"
    assert env["ddp-worker-2"]["RANK"] == "3"
    assert {e["WORLD_SIZE"] for e in env.values()} == {"4"}
    assert {e["MASTER_ADDR"] for e in env.values()} == {"ddp-master-0"}
    assert {e["MASTER_PORT"] for e in env.values()} == {"23456"}
    master = next(p for p in pods if p.metadata.name == "ddp-master-0")
    assert master.metadata.labels["training.kubeflow.org/job-role"] == "master"
    assert master.spec.node_selector == {"accelerator": "nvidia-a100-80gb"}
    services = client.CoreV1Api(k8s).list_namespaced_service(namespace).items
    assert {"ddp-master-0", "ddp-worker-0"} <= {s.metadata.name for s in services}
    job = wait_for(lambda: _true(j := _obj(k8s, KUBEFLOW, namespace, "pytorchjobs", "ddp"),
                                 "Succeeded") and j, message="success")  # fmt: skip
    assert _true(job, "Created")
    assert job["status"]["replicaStatuses"]["Worker"]["succeeded"] == 3
    assert job["status"]["completionTime"]
    wait_for(lambda: (get(k8s, "clusterqueues", "cq").get("status") or {}).get(
        "admittedWorkloads") == 0, message="quota released")  # fmt: skip


def test_a_pytorchjob_beyond_quota_waits_suspended_and_a_failed_worker_fails_it(k8s, namespace):
    kueue_setup(k8s, namespace, quota=4)
    pytorchjob(k8s, namespace, "big", workers=4, gpus=1)
    message = wait_for(lambda: pending_message(k8s, namespace, "big") or (
        (w := _workload(k8s, namespace, "PyTorchJob", "big")) and (condition(
            w, "QuotaReserved") or {}).get("message")), message="pending")  # fmt: skip
    assert "insufficient quota for nvidia.com/gpu in flavor a100" in message
    assert not _pods(k8s, namespace, "training.kubeflow.org/job-name=big")
    pytorchjob(k8s, namespace, "crash", workers=1, gpus=1, exit_code=3)
    job = wait_for(lambda: _true(j := _obj(k8s, KUBEFLOW, namespace, "pytorchjobs", "crash"),
                                 "Failed") and j, message="failure")  # fmt: skip
    assert "1 Worker replica(s) failed" in _true(job, "Failed")["message"]


def test_a_jobset_runs_a_child_job_per_replica_and_completes_with_its_driver(k8s, namespace):
    kueue_setup(k8s, namespace, quota=8)
    jobset(k8s, namespace, "sweep", workers=2, gpus=2, duration=2)
    wl = wait_for(lambda: (w := _workload(k8s, namespace, "JobSet", "sweep")) and _true(
        w, "Admitted") and w, message="admission")  # fmt: skip
    podsets = [(p["name"], p["count"]) for p in wl["spec"]["podSets"]]
    assert podsets == [("driver", 1), ("workers", 2)]
    batch = client.BatchV1Api(k8s)
    children = wait_for(lambda: len(j := batch.list_namespaced_job(
        namespace, label_selector="jobset.sigs.k8s.io/jobset-name=sweep").items) == 3 and j,
        message="three child jobs")  # fmt: skip
    assert {j.metadata.name for j in children} == {"sweep-driver-0", "sweep-workers-0",
                                                   "sweep-workers-1"}  # fmt: skip
    worker = next(j for j in children if j.metadata.name == "sweep-workers-1")
    assert worker.metadata.labels["jobset.sigs.k8s.io/job-index"] == "1"
    assert worker.spec.template.spec.subdomain == "sweep"
    assert worker.spec.template.spec.node_selector == {"accelerator": "nvidia-a100-80gb"}
    assert client.CoreV1Api(k8s).read_namespaced_service("sweep", namespace).spec.cluster_ip == (
        "None"
    )
    js = wait_for(lambda: _true(j := _obj(k8s, JOBSET, namespace, "jobsets", "sweep"),
                                "Completed") and j, message="completion")  # fmt: skip
    assert js["status"]["terminalState"] == "Completed"
    driver = next(s for s in js["status"]["replicatedJobsStatus"] if s["name"] == "driver")
    assert driver["succeeded"] == 1
    wait_for(lambda: (get(k8s, "clusterqueues", "cq").get("status") or {}).get(
        "admittedWorkloads") == 0, message="quota released")  # fmt: skip


def test_a_failed_child_restarts_the_jobset_until_max_restarts(k8s, namespace):
    kueue_setup(k8s, namespace, quota=8)
    jobset(k8s, namespace, "flaky", workers=1, gpus=1, max_restarts=1, exit_code=1)
    js = wait_for(lambda: _true(j := _obj(k8s, JOBSET, namespace, "jobsets", "flaky"),
                                "Failed") and j, timeout=20, message="failure")  # fmt: skip
    assert js["status"]["restarts"] == 1
    assert js["status"]["terminalState"] == "Failed"
    # With a failure policy, JobSet says that the restarts ran out and which child failed first.
    assert _true(js, "Failed")["reason"] == "ReachedMaxRestarts"
    assert _true(js, "Failed")["message"].startswith(
        "jobset failed due to reaching max number of restarts (first failed job: flaky-"
    )
