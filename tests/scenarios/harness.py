"""What a scenario holds: one of the two clusters, and the objects of one scenario on it.

A scenario speaks only the Kubernetes API, through the official client, to whichever cluster it
is given: kubesim (started in-process on the real control plane's fleet, with Kueue configured
as the real one is) or the real control plane (cluster/: kube-apiserver, Kueue, JobSet, the
training operator, kwok). Nothing here reads kubesim's store.

The two differ in how a pod is told how long it runs and how it ends (kubesim's kubelet reads
`kubesim.dev/*` annotations, kwok's stages `qm.test/*`), which `Cluster.runs` hides, and in how
time passes: kubesim's clock can be stepped, the real cluster's cannot (`Cluster.elapse`).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import client, watch

from tests.scenarios import objects

T = TypeVar("T")

KUBESIM = "kubesim"
REAL = "real"

# (group, version, plural, namespaced) of every kind a scenario creates through CustomObjectsApi.
KINDS: dict[str, tuple[str, str, str, bool]] = {
    "ResourceFlavor": ("kueue.x-k8s.io", "v1beta2", "resourceflavors", False),
    "ClusterQueue": ("kueue.x-k8s.io", "v1beta2", "clusterqueues", False),
    "Cohort": ("kueue.x-k8s.io", "v1beta2", "cohorts", False),
    "LocalQueue": ("kueue.x-k8s.io", "v1beta2", "localqueues", True),
    "Workload": ("kueue.x-k8s.io", "v1beta2", "workloads", True),
    "WorkloadPriorityClass": ("kueue.x-k8s.io", "v1beta2", "workloadpriorityclasses", False),
    "Topology": ("kueue.x-k8s.io", "v1beta2", "topologies", False),
    "Job": ("batch", "v1", "jobs", True),
    "PyTorchJob": ("kubeflow.org", "v1", "pytorchjobs", True),
    "JobSet": ("jobset.x-k8s.io", "v1alpha2", "jobsets", True),
    # Volcano (kubesim only: see test_volcano.py); its Job kind is named apart from batch/v1.
    "VolcanoQueue": ("scheduling.volcano.sh", "v1beta1", "queues", False),
}
# Core kinds, through CoreV1Api: kind -> (create, read, patch, delete) method suffix.
CORE = {
    "Pod": "pod",
    "ResourceQuota": "resource_quota",
    "LimitRange": "limit_range",
    "PersistentVolumeClaim": "persistent_volume_claim",
    "Service": "service",
}


@dataclass
class Cluster:
    """One of the two clusters, as every scenario sees it."""

    name: str
    api: client.ApiClient
    kubeconfig: Path
    sim: Any = None  # kubesim.testing.RunningKubesim, for its clock only
    timeout: float = 60.0

    @property
    def is_real(self) -> bool:
        return self.name == REAL

    def runs(self, seconds: float, exit_code: int | None = None) -> dict[str, str]:
        """The pod annotations that make a container run `seconds` and end with exit_code."""
        if self.is_real:
            out = {"qm.test/duration": f"{seconds:g}s"}
            if exit_code is not None:
                out["qm.test/exit-code"] = str(exit_code)
            return out
        out = {"kubesim.dev/duration-seconds": f"{seconds:g}"}
        if exit_code is not None:
            out["kubesim.dev/exit-code"] = str(exit_code)
        return out

    def elapse(self, seconds: float) -> None:
        """Let `seconds` pass: kubesim's clock is stepped at once, the real cluster is waited on
        (its components keep wall-clock time)."""
        if self.is_real:
            time.sleep(seconds)
        else:
            self.sim.clock.advance(seconds)
            time.sleep(0.3)  # a round of the controllers at the new time


@dataclass
class Scenario:
    """The objects of one scenario on one cluster: unique names, created objects removed after
    it (namespaces with everything in them, then the cluster-scoped ones)."""

    cluster: Cluster
    namespaces: list[str] = field(default_factory=list)
    cluster_scoped: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self):
        api = self.cluster.api
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.batch = client.BatchV1Api(api)

    # -- names and namespaces ------------------------------------------------------------------

    @staticmethod
    def unique(prefix: str) -> str:
        """A DNS-1123 name no other scenario uses (cluster-scoped objects outlive a scenario on
        the real cluster, where deletion takes its time)."""
        return f"{prefix}-{uuid.uuid4().hex[:5]}"

    def namespace(self, prefix: str = "sc", labels: dict | None = None) -> str:
        name = self.unique(prefix)
        meta: dict = {"name": name}
        if labels:
            meta["labels"] = labels
        self.core.create_namespace({"metadata": meta})
        self.namespaces.append(name)
        return name

    # -- objects -------------------------------------------------------------------------------

    def create(self, obj: dict, namespace: str | None = None) -> dict:
        kind = obj["kind"]
        if namespace:
            obj.setdefault("metadata", {})["namespace"] = namespace
        ns = obj["metadata"].get("namespace")
        if kind in CORE:
            method = getattr(self.core, f"create_namespaced_{CORE[kind]}")
            return self.cluster.api.sanitize_for_serialization(method(ns, obj))
        group, version, plural, namespaced = KINDS[kind]
        if namespaced:
            return self.custom.create_namespaced_custom_object(group, version, ns, plural, obj)
        created = self.custom.create_cluster_custom_object(group, version, plural, obj)
        self.cluster_scoped.append((kind, obj["metadata"]["name"]))
        return created

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict:
        if kind in CORE:
            method = getattr(self.core, f"read_namespaced_{CORE[kind]}")
            return self.cluster.api.sanitize_for_serialization(method(name, namespace))
        group, version, plural, namespaced = KINDS[kind]
        if namespaced:
            return self.custom.get_namespaced_custom_object(group, version, namespace, plural, name)
        return self.custom.get_cluster_custom_object(group, version, plural, name)

    def list(self, kind: str, namespace: str, selector: str | None = None) -> list[dict]:
        if kind in CORE:
            method = getattr(self.core, f"list_namespaced_{CORE[kind]}")
            items = method(namespace, label_selector=selector or "").items
            return [self.cluster.api.sanitize_for_serialization(i) for i in items]
        group, version, plural, _ = KINDS[kind]
        return self.custom.list_namespaced_custom_object(
            group, version, namespace, plural, label_selector=selector or ""
        )["items"]

    def patch(self, kind: str, name: str, body: dict, namespace: str | None = None) -> dict:
        """A JSON merge patch (what `kubectl patch --type merge` sends)."""
        group, version, plural, namespaced = KINDS[kind]
        if namespaced:
            return self.custom.patch_namespaced_custom_object(
                group, version, namespace, plural, name, body
            )
        return self.custom.patch_cluster_custom_object(group, version, plural, name, body)

    def delete(self, kind: str, name: str, namespace: str | None = None) -> None:
        group, version, plural, namespaced = KINDS[kind]
        body = {"propagationPolicy": "Background"}
        if namespaced:
            self.custom.delete_namespaced_custom_object(
                group, version, namespace, plural, name, body=body
            )
        else:
            self.custom.delete_cluster_custom_object(group, version, plural, name, body=body)

    def pods(self, namespace: str, selector: str = "") -> list[client.V1Pod]:
        return self.core.list_namespaced_pod(namespace, label_selector=selector).items

    def raw_get(self, path: str) -> dict:
        """GET a path of the API (e.g. Kueue's visibility API, served through the aggregator)."""
        api = self.cluster.api
        response = api.call_api("GET", api.configuration.host + path)
        response.read()
        return json.loads(response.data)

    def pending_workloads(self, cq: str | None = None, ns: str | None = None, lq: str = "lq"):
        """Kueue's visibility API: the pending workloads of a ClusterQueue or a LocalQueue."""
        base = "/apis/visibility.kueue.x-k8s.io/v1beta2"
        path = (f"{base}/clusterqueues/{cq}/pendingworkloads" if cq
                else f"{base}/namespaces/{ns}/localqueues/{lq}/pendingworkloads")  # fmt: skip
        return self.raw_get(path)

    def pod_changes(self, namespace: str, name: str, since: str, *, timeout: float | None = None
                    ) -> list[tuple[str, client.V1Pod]]:  # fmt: skip
        """Every change to pod `name` after resourceVersion `since`, as (event type, pod), in
        the order the API server made them: a watch from `since` replays them all, so none is
        missed between two polls. It ends at the pod's deletion, or after `timeout` seconds
        (the cluster's timeout by default)."""
        stream = watch.Watch()
        changes = []
        for event in stream.stream(
            self.core.list_namespaced_pod, namespace, field_selector=f"metadata.name={name}",
            resource_version=since, timeout_seconds=int(timeout or self.cluster.timeout),
        ):  # fmt: skip
            changes.append((event["type"], event["object"]))
            if event["type"] == "DELETED":
                stream.stop()
        return changes

    def events(self, namespace: str, name: str | None = None) -> list[client.CoreV1Event]:
        items = self.core.list_namespaced_event(namespace).items
        return [e for e in items if name is None or e.involved_object.name == name]

    # -- Kueue -------------------------------------------------------------------------------

    def team(self, pool: str, gpus, *, tolerations=None, lq: str = "lq", **cq_kwargs):
        """A namespace with a LocalQueue `lq` over a ClusterQueue of `gpus` GPUs of one pool:
        (namespace, ClusterQueue name, flavor name)."""
        ns = self.namespace()
        flavor_name = self.unique(pool)
        cq = self.unique("cq")
        self.create(objects.flavor(flavor_name, pool, tolerations=tolerations))
        self.create(objects.cluster_queue(
            cq, {flavor_name: [objects.quota(gpus)]}, namespaces=[ns], **cq_kwargs))  # fmt: skip
        self.create(objects.local_queue(lq, cq), ns)
        return ns, cq, flavor_name

    def workload(self, ns: str, name: str, kind: str = "Job") -> dict | None:
        """The Workload Kueue made for the `kind` object `name` (None until it exists)."""
        for wl in self.list("Workload", ns):
            owners = wl["metadata"].get("ownerReferences") or []
            if any(r["kind"] == kind and r["name"] == name for r in owners):
                return wl
        return None

    def admitted(self, ns: str, name: str, kind: str = "Job") -> dict | None:
        wl = self.workload(ns, name, kind)
        return wl if objects.is_true(wl, "Admitted") else None

    def pending(self, ns: str, name: str, kind: str = "Job") -> str | None:
        """Why the object's Workload waits (QuotaReserved=False's message), None otherwise."""
        wl = self.workload(ns, name, kind)
        cond = objects.condition(wl, "QuotaReserved")
        if cond and cond["status"] == "False" and cond.get("message"):
            return cond["message"]
        return None

    def wait_admitted(self, ns: str, name: str, kind: str = "Job", **kw) -> dict:
        return self.wait(lambda: self.admitted(ns, name, kind), f"{kind} {name} admitted", **kw)

    def wait_pending(self, ns: str, name: str, kind: str = "Job", **kw) -> str:
        return self.wait(lambda: self.pending(ns, name, kind), f"{kind} {name} pending", **kw)

    def wait_condition(self, kind: str, name: str, ctype: str, ns: str | None = None, **kw):
        """The object once its condition ctype is True."""

        def probe():
            obj = self.get(kind, name, ns)
            return obj if objects.is_true(obj, ctype) else None

        return self.wait(probe, f"{kind} {name} {ctype}", **kw)

    def cq_status(self, name: str) -> dict:
        return self.get("ClusterQueue", name).get("status") or {}

    def running(self, ns: str, selector: str = "", count: int = 1) -> list[client.V1Pod] | None:
        """The running pods of a selector once there are `count` of them (bound to nodes)."""
        pods = [p for p in self.pods(ns, selector)
                if p.status and p.status.phase == "Running" and p.spec.node_name]  # fmt: skip
        return pods if len(pods) >= count else None

    def wait_running(self, ns: str, selector: str = "", count: int = 1, **kw):
        return self.wait(lambda: self.running(ns, selector, count),
                         f"{count} running pod(s) of {selector or ns}", **kw)  # fmt: skip

    # -- time ----------------------------------------------------------------------------------

    def wait(
        self,
        probe: Callable[[], T | None],
        what: str,
        timeout: float | None = None,
        interval: float = 0.1,
    ) -> T:
        """Poll probe until it returns something truthy; fail with what was awaited."""
        deadline = time.monotonic() + (timeout or self.cluster.timeout)
        last = None
        while True:
            last = probe()
            if last:
                return last
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.cluster.name}: timed out waiting for {what}: {last!r}")
            time.sleep(interval)

    def holds(self, probe: Callable[[], Any], what: str, seconds: float = 2.0) -> None:
        """probe stays truthy for `seconds` (of the cluster's time) while the controllers work."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            assert probe(), f"{self.cluster.name}: no longer true: {what}"
            time.sleep(0.2)

    # -- the end -------------------------------------------------------------------------------

    def cleanup(self) -> None:
        """Delete the namespaces and wait until their pods are gone (so that the next scenario
        finds the nodes free), then delete the cluster-scoped objects."""
        for ns in self.namespaces:
            try:
                self.core.delete_namespace(ns)
            except client.ApiException as exc:
                if exc.status != 404:
                    raise
        # A terminating namespace takes no new pods; its pods are removed at once rather than
        # stopped gracefully (the namespace controller would take seconds per scenario).
        deadline = time.monotonic() + 90
        for ns in self.namespaces:
            while time.monotonic() < deadline:
                try:
                    if not self.core.list_namespaced_pod(ns).items:
                        break
                    self.core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
                except client.ApiException as exc:
                    if exc.status == 404:
                        break
                    raise
                time.sleep(0.2)
        for kind, name in reversed(self.cluster_scoped):
            try:
                self.delete(kind, name)
            except client.ApiException as exc:
                if exc.status != 404:
                    raise
