"""The objects scenarios create, written as a user of Kueue, JobSet and the training operator
writes them (the upstream documentation's shapes), as plain dicts."""

from __future__ import annotations

from typing import Any

KUEUE_API = "kueue.x-k8s.io/v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
POOL_LABEL = "kubesim.dev/pool"
GPU = "nvidia.com/gpu"
SHARED_GPU = "nvidia.com/gpu.shared"
GPU_TOLERATION = {"key": GPU, "operator": "Exists", "effect": "NoSchedule"}
SPOT_TOLERATION = {"key": "cloud.google.com/gke-spot", "operator": "Exists"}
RACK = "cloud.provider.com/topology-rack"
HOST = "kubernetes.io/hostname"
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
IMAGE = "registry.example/trainer:1"


# -- Kueue --------------------------------------------------------------------------------------


def flavor(name: str, pool: str, *, tolerations=None, topology: str | None = None) -> dict:
    """A ResourceFlavor for the nodes of one fleet pool."""
    spec: dict = {"nodeLabels": {POOL_LABEL: pool}}
    if tolerations:
        spec["tolerations"] = list(tolerations)
    if topology:
        spec["topologyName"] = topology
    return {"apiVersion": KUEUE_API, "kind": "ResourceFlavor", "metadata": {"name": name},
            "spec": spec}  # fmt: skip


def topology(name: str, levels: list[str]) -> dict:
    return {"apiVersion": KUEUE_API, "kind": "Topology", "metadata": {"name": name},
            "spec": {"levels": [{"nodeLabel": level} for level in levels]}}  # fmt: skip


def quota(nominal: Any, borrowing: Any = None, lending: Any = None, *, resource: str = GPU):
    out: dict = {"name": resource, "nominalQuota": nominal}
    if borrowing is not None:
        out["borrowingLimit"] = borrowing
    if lending is not None:
        out["lendingLimit"] = lending
    return out


def resource_groups(flavors: dict[str, list[dict]]) -> list[dict]:
    """One resource group: flavor name -> its resources' quotas (in the order given)."""
    covered = [r["name"] for r in next(iter(flavors.values()))]
    return [{"coveredResources": covered,
             "flavors": [{"name": f, "resources": rs} for f, rs in flavors.items()]}]  # fmt: skip


def cluster_queue(
    name: str,
    flavors: dict[str, list[dict]],
    *,
    namespaces: list[str] | None = None,
    cohort: str | None = None,
    preemption: dict | None = None,
    strategy: str | None = None,
    stop: str | None = None,
    weight: str | None = None,
    admission_fair_sharing: bool = False,
    selector: dict | None = None,
) -> dict:
    """A ClusterQueue for the given namespaces (matched by name), or `selector` as given."""
    if selector is None:
        selector = (
            {
                "matchExpressions": [
                    {
                        "key": "kubernetes.io/metadata.name",
                        "operator": "In",
                        "values": list(namespaces),
                    }
                ]
            }  # fmt: skip
            if namespaces
            else {}
        )
    spec: dict = {"namespaceSelector": selector, "resourceGroups": resource_groups(flavors)}
    if cohort:
        spec["cohortName"] = cohort
    if preemption:
        spec["preemption"] = preemption
    if strategy:
        spec["queueingStrategy"] = strategy
    if stop:
        spec["stopPolicy"] = stop
    if weight is not None:
        spec["fairSharing"] = {"weight": weight}
    if admission_fair_sharing:
        spec["admissionScope"] = {"admissionMode": "UsageBasedAdmissionFairSharing"}
    return {"apiVersion": KUEUE_API, "kind": "ClusterQueue", "metadata": {"name": name},
            "spec": spec}  # fmt: skip


def cohort(name: str, parent: str | None = None, *, weight=None, flavors=None) -> dict:
    spec: dict = {}
    if parent:
        spec["parentName"] = parent
    if weight is not None:
        spec["fairSharing"] = {"weight": weight}
    if flavors:
        spec["resourceGroups"] = resource_groups(flavors)
    return {"apiVersion": KUEUE_API, "kind": "Cohort", "metadata": {"name": name}, "spec": spec}


def local_queue(name: str, cluster_queue_name: str, *, stop=None, weight=None) -> dict:
    spec: dict = {"clusterQueue": cluster_queue_name}
    if stop:
        spec["stopPolicy"] = stop
    if weight is not None:
        spec["fairSharing"] = {"weight": weight}
    return {"apiVersion": KUEUE_API, "kind": "LocalQueue", "metadata": {"name": name},
            "spec": spec}  # fmt: skip


def priority_class(name: str, value: int) -> dict:
    return {"apiVersion": KUEUE_API, "kind": "WorkloadPriorityClass", "metadata": {"name": name},
            "value": value}  # fmt: skip


# -- pods and jobs ------------------------------------------------------------------------------


def container(name: str = "trainer", *, limits=None, requests=None, env=None) -> dict:
    out: dict = {"name": name, "image": IMAGE}
    resources = {}
    if limits:
        resources["limits"] = {k: str(v) for k, v in limits.items()}
    if requests:
        resources["requests"] = {k: str(v) for k, v in requests.items()}
    if resources:
        out["resources"] = resources
    if env:
        out["env"] = [{"name": k, "value": str(v)} for k, v in env.items()]
    return out


def pod_template(
    resources: dict | None = None,
    *,
    annotations=None,
    restart: str = "Never",
    tolerations=None,
    name: str = "trainer",
    labels=None,
) -> dict:
    """A pod template with one container whose limits are `resources` (e.g. {GPU: 2})."""
    spec: dict = {"restartPolicy": restart, "containers": [container(name, limits=resources)]}
    if tolerations:
        spec["tolerations"] = list(tolerations)
    meta: dict = {"annotations": dict(annotations or {})}
    if labels:
        meta["labels"] = dict(labels)
    return {"metadata": meta, "spec": spec}


def job(
    name: str,
    queue: str | None,
    resources: dict | None = None,
    *,
    workers: int = 1,
    annotations=None,
    priority: str | None = None,
    backoff_limit: int = 0,
    indexed: bool = True,
    tolerations=None,
    pod_failure_policy: dict | None = None,
) -> dict:
    """A batch Job (suspended when it names a queue), as the portal renders one: `workers`
    pods of an Indexed Job, each with `resources` as limits."""
    labels = {QUEUE_LABEL: queue} if queue else {}
    if priority:
        labels[PRIORITY_LABEL] = priority
    spec: dict = {
        "suspend": bool(queue),
        "parallelism": workers,
        "completions": workers,
        "backoffLimit": backoff_limit,
        "template": pod_template(resources, annotations=annotations, tolerations=tolerations),
    }
    if indexed:
        spec["completionMode"] = "Indexed"
    if pod_failure_policy:
        spec["podFailurePolicy"] = pod_failure_policy
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": labels}, "spec": spec}  # fmt: skip


def pytorch_job(
    name: str,
    queue: str,
    gpus: int,
    *,
    workers: int,
    annotations=None,
    worker_annotations=None,
    restart: str = "OnFailure",
    backoff_limit: int | None = None,
    tolerations=None,
) -> dict:
    """A PyTorchJob of one master and `workers` workers, each with `gpus` GPUs."""

    def replicas(count: int, extra) -> dict:
        notes = {**(annotations or {}), **(extra or {})}
        template = pod_template({GPU: gpus}, annotations=notes, name="pytorch",
                                restart=restart if restart != "ExitCode" else "Never",
                                tolerations=tolerations)  # fmt: skip
        return {"replicas": count, "restartPolicy": restart, "template": template}

    run_policy: dict = {"suspend": True}
    if backoff_limit is not None:
        run_policy["backoffLimit"] = backoff_limit
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "labels": {QUEUE_LABEL: queue}},
        "spec": {
            "runPolicy": run_policy,
            "pytorchReplicaSpecs": {
                "Master": replicas(1, None),
                "Worker": replicas(workers, worker_annotations),
            },
        },
    }


def replicated_job(
    name: str, resources: dict | None, *, replicas: int = 1, pods: int = 1, annotations=None,
    tolerations=None, template_annotations=None,
) -> dict:  # fmt: skip
    """One replicatedJob of a JobSet: `replicas` child Jobs of `pods` pods each."""
    job_spec = {
        "parallelism": pods,
        "completions": pods,
        "backoffLimit": 0,
        "template": pod_template(resources, annotations=annotations, tolerations=tolerations),
    }
    template: dict = {"spec": job_spec}
    if template_annotations:
        template["metadata"] = {"annotations": dict(template_annotations)}
    return {"name": name, "replicas": replicas, "template": template}


def job_set(
    name: str, queue: str, replicated: list[dict], *, success=None, max_restarts=None
) -> dict:
    spec: dict = {"suspend": True, "replicatedJobs": replicated}
    if success:
        spec["successPolicy"] = success
    if max_restarts is not None:
        spec["failurePolicy"] = {"maxRestarts": max_restarts}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "labels": {QUEUE_LABEL: queue}}, "spec": spec}  # fmt: skip


def pod(name: str, resources: dict | None = None, *, annotations=None, node_selector=None,
        tolerations=None, requests=None) -> dict:  # fmt: skip
    spec: dict = {
        "restartPolicy": "Never",
        "containers": [container(limits=resources, requests=requests)],
    }
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if tolerations:
        spec["tolerations"] = list(tolerations)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": dict(annotations or {})},
            "spec": spec}  # fmt: skip


# -- reading ------------------------------------------------------------------------------------


def conditions(obj: dict | None) -> dict[str, dict]:
    """An object's status conditions by type."""
    return {c["type"]: c for c in ((obj or {}).get("status") or {}).get("conditions") or []}


def condition(obj: dict | None, kind: str) -> dict | None:
    return conditions(obj).get(kind)


def is_true(obj: dict | None, kind: str) -> bool:
    return (condition(obj, kind) or {}).get("status") == "True"
