"""Helpers for the Kueue/Volcano/scheduler tests: create objects like a user would, then wait."""

from kubernetes import client

from kubesim.testing import wait_stepping

KUEUE = ("kueue.x-k8s.io", "v1beta2")
GPU = "nvidia.com/gpu"
A100_LABELS = {"accelerator": "nvidia-a100-80gb"}
GPU_TOLERATION = {"key": GPU, "operator": "Exists", "effect": "NoSchedule"}


def wait_for(predicate, timeout=15.0, interval=0.05, message="condition"):
    """The predicate's first truthy value, the simulated clock stepped to each next event
    meanwhile (kubesim.testing.wait_stepping); fail the test after timeout."""
    last = None

    def probe():
        nonlocal last
        last = predicate()
        return last

    if value := wait_stepping(probe, timeout=timeout, interval=interval):
        return value
    raise AssertionError(f"timed out waiting for {message}; last value: {last!r}")


def create(k8s, plural, body, namespace=None):
    co = client.CustomObjectsApi(k8s)
    body = {"apiVersion": "/".join(KUEUE), **body}
    if namespace:
        return co.create_namespaced_custom_object(*KUEUE, namespace, plural, body)
    return co.create_cluster_custom_object(*KUEUE, plural, body)


def get(k8s, plural, name, namespace=None):
    co = client.CustomObjectsApi(k8s)
    if namespace:
        return co.get_namespaced_custom_object(*KUEUE, namespace, plural, name)
    return co.get_cluster_custom_object(*KUEUE, plural, name)


def patch(k8s, plural, name, body, namespace=None):
    co = client.CustomObjectsApi(k8s)
    if namespace:
        return co.patch_namespaced_custom_object(*KUEUE, namespace, plural, name, body)
    return co.patch_cluster_custom_object(*KUEUE, plural, name, body)


def flavor(k8s, name="a100", labels=None, tolerations=None):
    spec = {"nodeLabels": labels or A100_LABELS}
    spec["tolerations"] = [GPU_TOLERATION] if tolerations is None else tolerations
    return create(k8s, "resourceflavors", {"kind": "ResourceFlavor", "metadata": {"name": name},
                                           "spec": spec})  # fmt: skip


def cluster_queue(
    k8s,
    name,
    quota,
    *,
    flavor_name="a100",
    cohort=None,
    borrowing=None,
    lending=None,
    preemption=None,
    strategy=None,
    stop=None,
):
    resource = {"name": GPU, "nominalQuota": quota}
    if borrowing is not None:
        resource["borrowingLimit"] = borrowing
    if lending is not None:
        resource["lendingLimit"] = lending
    spec = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": [GPU],
                "flavors": [{"name": flavor_name, "resources": [resource]}],
            }
        ],
    }
    if cohort:
        spec["cohortName"] = cohort
    if preemption:
        spec["preemption"] = preemption
    if strategy:
        spec["queueingStrategy"] = strategy
    if stop:
        spec["stopPolicy"] = stop
    return create(k8s, "clusterqueues", {"kind": "ClusterQueue", "metadata": {"name": name},
                                         "spec": spec})  # fmt: skip


def local_queue(k8s, namespace, name, cq, stop=None):
    spec = {"clusterQueue": cq}
    if stop:
        spec["stopPolicy"] = stop
    return create(
        k8s,
        "localqueues",
        {"kind": "LocalQueue", "metadata": {"name": name}, "spec": spec},
        namespace=namespace,
    )


def priority_class(k8s, name, value):
    return create(
        k8s,
        "workloadpriorityclasses",
        {"kind": "WorkloadPriorityClass", "metadata": {"name": name}, "value": value},
    )


def job(k8s, namespace, name, *, workers=1, gpus=1, duration=60, queue="lq", priority=None,
        exit_code=None, extra_annotations=None):  # fmt: skip
    """A suspended Indexed Job labelled for Kueue, like the portal renders one."""
    labels = {"kueue.x-k8s.io/queue-name": queue} if queue else {}
    if priority:
        labels["kueue.x-k8s.io/priority-class"] = priority
    annotations = {"kubesim.dev/duration-seconds": str(duration)}
    if exit_code is not None:
        annotations["kubesim.dev/exit-code"] = str(exit_code)
    annotations.update(extra_annotations or {})
    body = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "suspend": bool(queue),
            "parallelism": workers,
            "completions": workers,
            "completionMode": "Indexed",
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": annotations},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "train",
                            "image": "registry.example/train:1",
                            "resources": {"limits": {GPU: str(gpus)}},
                        }
                    ],
                },
            },
        },
    }
    return client.BatchV1Api(k8s).create_namespaced_job(namespace, body)


def workload_for(k8s, namespace, job_name):
    """The Workload Kueue created for a Job (None until it exists)."""
    co = client.CustomObjectsApi(k8s)
    items = co.list_namespaced_custom_object(*KUEUE, namespace, "workloads")["items"]
    for wl in items:
        for ref in wl["metadata"].get("ownerReferences") or []:
            if ref.get("kind") == "Job" and ref.get("name") == job_name:
                return wl
    return None


def condition(obj, ctype):
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond["type"] == ctype:
            return cond
    return None


def is_admitted(k8s, namespace, job_name):
    wl = workload_for(k8s, namespace, job_name)
    cond = condition(wl, "Admitted") if wl else None
    return wl if cond and cond["status"] == "True" else None


def pending_message(k8s, namespace, job_name):
    wl = workload_for(k8s, namespace, job_name)
    cond = condition(wl, "QuotaReserved") if wl else None
    return cond["message"] if cond and cond["status"] == "False" else None


def job_pods(k8s, namespace, job_name):
    return (
        client.CoreV1Api(k8s)
        .list_namespaced_pod(namespace, label_selector=f"batch.kubernetes.io/job-name={job_name}")
        .items
    )


def phase_of(obj):
    """status.phase of a typed object, None while it has no status yet."""
    return obj.status.phase if obj.status else None


def conditions_of(obj):
    """status.conditions of a typed object ([] while it has none)."""
    return (obj.status.conditions if obj.status else None) or []


def pod_phase(v1, namespace, name):
    return phase_of(v1.read_namespaced_pod(name, namespace))


def running_pods(k8s, namespace, job_name):
    return [p for p in job_pods(k8s, namespace, job_name) if phase_of(p) == "Running"]


def kueue_setup(k8s, namespace, quota, cq="cq", **cq_kwargs):
    """One flavor, one ClusterQueue with `quota` GPUs, LocalQueue "lq" in namespace."""
    flavor(k8s)
    cluster_queue(k8s, cq, quota, **cq_kwargs)
    local_queue(k8s, namespace, "lq", cq)
