"""Volcano (batch.volcano.sh/v1alpha1 Jobs, scheduling.volcano.sh/v1beta1 Queues and PodGroups):
a job's PodGroup asks for its whole gang (minMember, minResources), the queue's capability
admits it whole or not at all, its pods get hostnames under the job's subdomain with the svc
plugin's host lists, and a closed queue admits nothing (Volcano's "Queue", "PodGroup" and
"VolcanoJob" pages).

These run on kubesim only: Volcano cannot be built from the Go module proxy (the README's
"real control plane" section: volcano.sh/apis at Volcano's version is not served), so the real
control plane has no Volcano to hold kubesim to."""

from __future__ import annotations

import pytest

from tests.scenarios import objects as o
from tests.scenarios.objects import GPU, GPU_TOLERATION

BATCH = ("batch.volcano.sh", "v1alpha1")
SCHED = ("scheduling.volcano.sh", "v1beta1")
# Volcano cannot be built from the Go module proxy: volcano.sh/apis@v1.15.1 is refused ("403
# Forbidden: This module version is not available") and v1.14.0's scheduler does not compile
# (undefined: schedulingv1beta1.QueueAllocationGateKey). The README's real control plane section.
pytestmark = pytest.mark.kubesim_only("Volcano does not build from the Go module proxy")


@pytest.fixture
def volcano(sc):
    return sc


def _queue(sc, gpus: int, *, state: str | None = None) -> str:
    name = sc.unique("vq")
    spec: dict = {"weight": 1, "reclaimable": True, "capability": {GPU: str(gpus)}}
    body = {"apiVersion": "/".join(SCHED), "kind": "Queue", "metadata": {"name": name},
            "spec": spec}  # fmt: skip
    sc.custom.create_cluster_custom_object(*SCHED, "queues", body)
    if state:
        sc.custom.patch_cluster_custom_object_status(*SCHED, "queues", name,
                                                     {"status": {"state": state}})  # fmt: skip
    sc.cluster_scoped.append(("VolcanoQueue", name))
    return name


def _vcjob(sc, ns: str, name: str, queue: str, *, workers: int, gpus: int, seconds: float):
    template = o.pod_template({GPU: gpus}, annotations=sc.cluster.runs(seconds),
                              tolerations=[GPU_TOLERATION])  # fmt: skip
    template["spec"]["nodeSelector"] = {o.POOL_LABEL: "a100"}
    body = {
        "apiVersion": "/".join(BATCH),
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "schedulerName": "volcano",
            "queue": queue,
            "minAvailable": workers,
            "plugins": {"svc": [], "env": []},
            "tasks": [{"name": "worker", "replicas": workers, "template": template}],
        },
    }
    sc.custom.create_namespaced_custom_object(*BATCH, ns, "jobs", body)


def _phase(sc, ns: str, name: str) -> str | None:
    job = sc.custom.get_namespaced_custom_object(*BATCH, ns, "jobs", name)
    return ((job.get("status") or {}).get("state") or {}).get("phase")


def _podgroup(sc, ns: str, job: str) -> dict | None:
    items = sc.custom.list_namespaced_custom_object(*SCHED, ns, "podgroups")["items"]
    return next((pg for pg in items if pg["metadata"]["name"].startswith(f"{job}-")), None)


def _unschedulable(sc, ns: str, job: str) -> dict | None:
    conditions = ((_podgroup(sc, ns, job) or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "Unschedulable"), None)


def test_a_gang_is_admitted_whole_within_its_queues_capability(volcano):
    sc = volcano
    ns, queue = sc.namespace(), _queue(sc, 4)
    _vcjob(sc, ns, "first", queue, workers=2, gpus=2, seconds=600)
    sc.wait(lambda: _phase(sc, ns, "first") == "Running", "the first job running")
    group = _podgroup(sc, ns, "first")
    assert (group["spec"]["minMember"], group["spec"]["queue"]) == (2, queue)
    assert group["spec"]["minResources"] == {GPU: "4"}
    pods = sc.wait_running(ns, "volcano.sh/job-name=first", 2)
    assert sorted(p.spec.hostname for p in pods) == ["first-worker-0", "first-worker-1"]
    assert {p.spec.subdomain for p in pods} == {"first"}
    env = {e.name: e.value for e in pods[0].spec.containers[0].env or []}
    assert env["VC_WORKER_HOSTS"] == "first-worker-0.first,first-worker-1.first"
    # The queue is full: a second gang waits whole, without pods.
    _vcjob(sc, ns, "second", queue, workers=2, gpus=1, seconds=600)
    blocked = sc.wait(lambda: _unschedulable(sc, ns, "second"), "the second gang blocked")
    assert "queue resource quota insufficient" in blocked["message"]
    assert sc.pods(ns, "volcano.sh/job-name=second") == []
    assert _phase(sc, ns, "second") == "Pending"


def test_a_closed_queue_admits_nothing(volcano):
    sc = volcano
    ns, queue = sc.namespace(), _queue(sc, 8, state="Closed")
    _vcjob(sc, ns, "held", queue, workers=1, gpus=1, seconds=600)
    blocked = sc.wait(lambda: _unschedulable(sc, ns, "held"), "the held job blocked")
    assert blocked["message"] == f"queue {queue} is closed"
    sc.holds(lambda: not sc.pods(ns, "volcano.sh/job-name=held"), "no pod of a closed queue", 1.0)
