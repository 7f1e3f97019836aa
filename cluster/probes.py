"""What `up` waits for beyond each process's health endpoint: CRDs established, nodes Ready,
each add-on's webhooks answering (a dry-run create passes through them) and Kueue's visibility
API available through the API server's aggregator."""

from __future__ import annotations

from cluster.api import Api
from cluster.components import Probe

BUSYBOX = {"name": "probe", "image": "busybox"}


def crds_established(api: Api, names: list[str]) -> Probe:
    def probe() -> tuple[bool, str]:
        for name in names:
            crd = api.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
            conditions = {
                c["type"]: c["status"] for c in crd.get("status", {}).get("conditions", [])
            }
            if conditions.get("Established") != "True":
                return False, f"{name} not established"
        return True, ""

    return probe


def nodes_ready(api: Api, names: set[str]) -> Probe:
    def probe() -> tuple[bool, str]:
        ready = {
            node["metadata"]["name"]
            for node in api.get("/api/v1/nodes").get("items", [])
            if any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in node.get("status", {}).get("conditions") or []
            )
        }
        missing = sorted(names - ready)
        return not missing, f"not ready: {', '.join(missing[:5])}"

    return probe


def _dry_run(api: Api, obj: dict) -> Probe:
    return lambda: (bool(api.create(obj, dry_run=True)), "")


def _pod_template() -> dict:
    return {"spec": {"restartPolicy": "Never", "containers": [dict(BUSYBOX)]}}


def webhooks(api: Api) -> list[tuple[str, Probe]]:
    """(name, probe) for the webhooks of each add-on."""
    meta = {"name": "real-cluster-probe", "namespace": "default"}
    return [
        (
            "kueue webhooks",
            _dry_run(
                api,
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "kind": "ResourceFlavor",
                    "metadata": {"name": meta["name"]},
                },
            ),
        ),
        (
            "kueue job webhook",
            _dry_run(
                api,
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "metadata": {**meta, "labels": {"kueue.x-k8s.io/queue-name": "probe"}},
                    "spec": {"template": _pod_template()},
                },
            ),
        ),
        (
            "jobset webhooks",
            _dry_run(
                api,
                {
                    "apiVersion": "jobset.x-k8s.io/v1alpha2",
                    "kind": "JobSet",
                    "metadata": meta,
                    "spec": {
                        "replicatedJobs": [
                            {"name": "w", "template": {"spec": {"template": _pod_template()}}}
                        ]
                    },
                },
            ),
        ),
        (
            "training-operator webhooks",
            _dry_run(
                api,
                {
                    "apiVersion": "kubeflow.org/v1",
                    "kind": "PyTorchJob",
                    "metadata": meta,
                    "spec": {
                        "pytorchReplicaSpecs": {
                            "Master": {
                                "replicas": 1,
                                "template": {
                                    "spec": {"containers": [{**BUSYBOX, "name": "pytorch"}]}
                                },
                            }
                        }
                    },
                },
            ),
        ),
    ]


def visibility(api: Api) -> Probe:
    def probe() -> tuple[bool, str]:
        service = api.get(
            "/apis/apiregistration.k8s.io/v1/apiservices/v1beta2.visibility.kueue.x-k8s.io"
        )
        for condition in service.get("status", {}).get("conditions") or []:
            if condition["type"] == "Available":
                return condition["status"] == "True", condition.get("message", "")
        return False, "no Available condition yet"

    return probe
