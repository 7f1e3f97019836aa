"""Kubernetes objects the conformance tests create, written as a user of Kueue, JobSet and the
training operator would write them, and a holder that removes the cluster-scoped ones after a
test (namespaced ones go with the test's namespace)."""

from __future__ import annotations

from kubernetes import client

KUEUE = ("kueue.x-k8s.io", "v1beta2")
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
POOL_LABEL = "kubesim.dev/pool"
GPU = "nvidia.com/gpu"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def resource_flavor(name: str, pool: str, *, tolerate_gpu_taint: bool = False) -> dict:
    spec: dict = {"nodeLabels": {POOL_LABEL: pool}}
    if tolerate_gpu_taint:
        spec["tolerations"] = [GPU_TOLERATION]
    return {
        "apiVersion": "/".join(KUEUE),
        "kind": "ResourceFlavor",
        "metadata": {"name": name},
        "spec": spec,
    }


def cluster_queue(
    name: str, namespace: str, flavor: str, gpus: int, *, resource: str = GPU, preempt=False
) -> dict:
    spec: dict = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "resourceGroups": [
            {
                "coveredResources": [resource],
                "flavors": [
                    {"name": flavor, "resources": [{"name": resource, "nominalQuota": gpus}]}
                ],
            }
        ],
    }
    if preempt:
        spec["preemption"] = {"withinClusterQueue": "LowerPriority"}
    return {
        "apiVersion": "/".join(KUEUE),
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": spec,
    }


def local_queue(name: str, namespace: str, cluster_queue_name: str) -> dict:
    return {
        "apiVersion": "/".join(KUEUE),
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cluster_queue_name},
    }


def priority_class(name: str, value: int) -> dict:
    return {
        "apiVersion": "/".join(KUEUE),
        "kind": "WorkloadPriorityClass",
        "metadata": {"name": name},
        "value": value,
    }


def pod_template(gpus: int, *, resource: str = GPU, annotations=None, restart="Never") -> dict:
    return {
        "metadata": {"annotations": dict(annotations or {})},
        "spec": {
            "restartPolicy": restart,
            "containers": [
                {
                    "name": "trainer",
                    "image": "registry.example/trainer:1",
                    "resources": {"limits": {resource: str(gpus)}},
                }
            ],
        },
    }


def batch_job(
    name: str,
    namespace: str,
    queue: str,
    gpus: int,
    *,
    annotations=None,
    backoff_limit: int = 0,
    priority: str | None = None,
) -> dict:
    labels = {QUEUE_LABEL: queue}
    if priority:
        labels[PRIORITY_LABEL] = priority
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "suspend": True,
            "backoffLimit": backoff_limit,
            "template": pod_template(gpus, annotations=annotations),
        },
    }


def job_set(name: str, namespace: str, queue: str, *, workers: int, gpus: int, annotations=None):
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": namespace, "labels": {QUEUE_LABEL: queue}},
        "spec": {
            "suspend": True,
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "parallelism": workers,
                            "completions": workers,
                            "backoffLimit": 0,
                            "template": pod_template(gpus, annotations=annotations),
                        }
                    },
                }
            ],
        },
    }


def pytorch_job(
    name: str, namespace: str, queue: str, *, workers: int, gpus: int, annotations=None
):
    def replicas(count: int) -> dict:
        template = pod_template(gpus, annotations=annotations, restart="OnFailure")
        template["spec"]["containers"][0]["name"] = "pytorch"  # the operator's container name
        return {"replicas": count, "restartPolicy": "OnFailure", "template": template}

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": namespace, "labels": {QUEUE_LABEL: queue}},
        "spec": {
            "runPolicy": {"suspend": True},
            "pytorchReplicaSpecs": {"Master": replicas(1), "Worker": replicas(workers)},
        },
    }


def conditions(obj: dict) -> dict[str, dict]:
    """An object's status conditions by type."""
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


def is_true(obj: dict, condition: str) -> bool:
    return conditions(obj).get(condition, {}).get("status") == "True"


class ClusterObjects:
    """Creates cluster-scoped Kueue objects for one test and deletes them afterwards."""

    def __init__(self, api: client.ApiClient):
        self.custom = client.CustomObjectsApi(api)
        self.created: list[tuple[str, str]] = []

    def create(self, obj: dict) -> dict:
        plural = obj["kind"].lower() + ("es" if obj["kind"].endswith("s") else "s")
        namespace = obj["metadata"].get("namespace")
        if namespace:
            return self.custom.create_namespaced_custom_object(*KUEUE, namespace, plural, obj)
        created = self.custom.create_cluster_custom_object(*KUEUE, plural, obj)
        self.created.append((plural, obj["metadata"]["name"]))
        return created

    def delete_all(self) -> None:
        for plural, name in reversed(self.created):
            try:
                self.custom.delete_cluster_custom_object(*KUEUE, plural, name)
            except client.ApiException as exc:
                if exc.status != 404:
                    raise
