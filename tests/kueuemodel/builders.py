"""Small Kueue objects and a model of them, for kueuemodel's tests (no server, no store)."""

from __future__ import annotations

from kueuemodel.model import Listener, Model
from kueuemodel.queue import OneByOne
from kueuemodel.resources import GPU
from kueuemodel.types import WL, PodSet

FLAVOR_LABEL = "pool"


def flavor(name: str, *, taints=(), labels=None, topology=None) -> dict:
    spec: dict = {"nodeLabels": labels if labels is not None else {FLAVOR_LABEL: name}}
    if taints:
        spec["nodeTaints"] = list(taints)
    if topology:
        spec["topologyName"] = topology
    return {"metadata": {"name": name}, "spec": spec}


def cluster_queue(
    name: str, quotas: dict, *, cohort: str | None = "dept", within="LowerPriority",
    reclaim="Any", strategy="BestEffortFIFO", **spec,
) -> dict:  # fmt: skip
    """`quotas`: flavor -> nominal, or (nominal, borrowingLimit, lendingLimit)."""
    flavors = []
    for fl, quota in quotas.items():
        nominal, borrowing, lending = quota if isinstance(quota, tuple) else (quota, None, None)
        resource = {"name": GPU, "nominalQuota": nominal}
        if borrowing is not None:
            resource["borrowingLimit"] = borrowing
        if lending is not None:
            resource["lendingLimit"] = lending
        flavors.append({"name": fl, "resources": [resource]})
    body = {"namespaceSelector": {}, "queueingStrategy": strategy,
            "resourceGroups": [{"coveredResources": [GPU], "flavors": flavors}],
            "preemption": {"withinClusterQueue": within, "reclaimWithinCohort": reclaim},
            **spec}  # fmt: skip
    if cohort:
        body["cohortName"] = cohort
    return {"metadata": {"name": name}, "spec": body}


class Recorder(Listener):
    """What the model told its driver, in order."""

    def __init__(self):
        self.seen: list[tuple] = []
        self.why: dict[str, str] = {}  # workload -> the message of its last eviction

    def admitted(self, wl, cq) -> None:
        self.seen.append(("admitted", wl.name, cq.name, tuple(wl.assignment[0].values())))

    def evicted(self, wl, reason, message, *, requeue, preempted_reason) -> None:
        self.seen.append(("evicted", wl.name, reason, preempted_reason, requeue))
        self.why[wl.name] = message

    def finished(self, wl, succeeded, message) -> None:
        self.seen.append(("finished", wl.name, succeeded))

    def pending(self, wl, message) -> None:
        self.seen.append(("pending", wl.name, message))

    def of(self, kind: str) -> list[tuple]:
        return [event[1:] for event in self.seen if event[0] == kind]


def model_of(
    cqs: list[dict], *, flavors=("a100",), cohorts=(), fair_sharing=False, strategy=OneByOne,
    local_queues: dict | None = None, afs=None,
) -> Model:  # fmt: skip
    """A model of the ClusterQueues, each with a LocalQueue "lq" in a namespace of its name
    (or the LocalQueues given: (namespace, name) -> ClusterQueue or a LocalQueue spec)."""
    model = Model(fair_sharing=fair_sharing, listener=Recorder(), strategy=strategy,
                  admission_fair_sharing=afs)  # fmt: skip
    for fl in flavors:
        obj = fl if isinstance(fl, dict) else flavor(fl)
        model.set_flavor(obj["metadata"]["name"], obj)
    for obj in cohorts:
        model.set_cohort(obj["metadata"]["name"], obj)
    for obj in cqs:
        model.set_cluster_queue(obj["metadata"]["name"], obj)
    if local_queues is None:
        local_queues = {(obj["metadata"]["name"], "lq"): obj["metadata"]["name"] for obj in cqs}
    for (ns, name), spec in local_queues.items():
        spec = {"clusterQueue": spec} if isinstance(spec, str) else spec
        model.set_local_queue((ns, name), {"metadata": {"name": name, "namespace": ns},
                                           "spec": spec})  # fmt: skip
    model.rebuild()
    return model


def workload(
    name: str, ns: str, gpus: int, *, count: int = 1, priority: int = 0, pool: str | None = None,
    queue: str = "lq", spec: dict | None = None, topology: dict | None = None,
) -> WL:  # fmt: skip
    """A workload of `count` pods of `gpus` GPUs each (in `pool`, if set)."""
    spec = dict(spec or {})
    if pool:
        spec["nodeSelector"] = {FLAVOR_LABEL: pool}
    podset = PodSet("main", count, {GPU: gpus}, spec, topology)
    return WL(ns=ns, name=name, uid=f"uid-{name}", queue=queue, priority=priority, created="",
              seq=0, podsets=[podset])  # fmt: skip


def submit(model: Model, *wls: WL) -> list[WL]:
    """Queue the workloads, created in this order."""
    for wl in wls:
        model.seq += 1
        wl.seq = model.seq
        wl.created = f"{model.seq:08d}"
        model.workloads[wl.key] = wl
        model.enqueue(wl)
    return list(wls)


def admitted(model: Model) -> set[str]:
    return {wl.name for wl in model.workloads.values() if wl.state == "admitted"}
