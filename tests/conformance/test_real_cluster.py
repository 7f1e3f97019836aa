"""The real control plane works end to end: kwok nodes carry the fleet's GPUs; real Kueue admits
a batch Job, a JobSet and a PyTorchJob, whose pods the real scheduler binds to kwok nodes and
kwok's stages run to their end (success, or failure with the exit code the test chose, retried
as the Job says); Kueue preempts by priority and answers its visibility API through the
aggregator; the DCGM exporter attributes the devices of running pods."""

from __future__ import annotations

import json

import pytest
import requests
from kubernetes import client

from cluster import nodes as kwok_nodes
from cluster.testing import unique_name, wait_for
from kubesim.fleet import SHARED_GPU
from kueuemodel.resources import parse_quantity
from tests.conformance import objects
from tests.conformance.objects import GPU, is_true

KUEUE = objects.KUEUE
SHORT = {"qm.test/duration": "2s"}


@pytest.fixture
def kueue_objects(kube):
    holder = objects.ClusterObjects(kube)
    yield holder
    holder.delete_all()


@pytest.fixture
def queue(kueue_objects, namespace):
    """A LocalQueue in the test's namespace over 8 L4 GPUs."""
    flavor = unique_name("l4")
    cq = unique_name("cq")
    kueue_objects.create(objects.resource_flavor(flavor, "l4"))
    kueue_objects.create(objects.cluster_queue(cq, namespace, flavor, 8))
    kueue_objects.create(objects.local_queue("team", namespace, cq))
    return "team"


def _job(kube, namespace, name) -> client.V1Job:
    return client.BatchV1Api(kube).read_namespaced_job(name, namespace)


def _job_condition(kube, namespace, name, condition) -> dict | None:
    job = kube.sanitize_for_serialization(_job(kube, namespace, name))
    return objects.conditions(job).get(condition) if is_true(job, condition) else None


def _reaches(kube, resource: tuple[str, str, str, str], name: str, condition: str):
    """A probe: the custom object (group, version, namespace, plural) once condition is true."""

    def probe():
        obj = client.CustomObjectsApi(kube).get_namespaced_custom_object(*resource, name)
        return obj if is_true(obj, condition) else None

    return probe


def _pods(kube, namespace, **selector) -> list[client.V1Pod]:
    labels = ",".join(f"{k}={v}" for k, v in selector.items())
    return client.CoreV1Api(kube).list_namespaced_pod(namespace, label_selector=labels).items


def _running(kube, namespace, job: str, count: int = 1) -> list[client.V1Pod] | None:
    """The Job's running pods once there are count of them."""
    pods = [p for p in _pods(kube, namespace, **{"job-name": job}) if p.status.phase == "Running"]
    return pods if len(pods) >= count else None


def _workloads(kube, namespace) -> list[dict]:
    return client.CustomObjectsApi(kube).list_namespaced_custom_object(
        *KUEUE, namespace, "workloads"
    )["items"]


def test_kwok_nodes_carry_the_fleets_gpus(kube, real_cluster_info):
    """Every node of the fleet file is Ready with its GPU, MIG and time-sliced resources, GPU
    feature discovery labels and taints, as kubesim builds them."""
    expected = kwok_nodes.fleet_nodes(kwok_nodes.read_fleet(real_cluster_info["fleet"]))
    listed = {n.metadata.name: n for n in client.CoreV1Api(kube).list_node().items}
    assert len(expected) >= 10
    for node in expected:
        name = node["metadata"]["name"]
        real = listed[name]
        ready = {c.type: c.status for c in real.status.conditions}
        assert ready.get("Ready") == "True", name
        # Compared as quantities: the API server writes them canonically ("1024Gi" is "1Ti").
        for resource, quantity in node["status"]["capacity"].items():
            want = parse_quantity(quantity)
            assert parse_quantity(real.status.capacity[resource]) == want, (name, resource)
            assert parse_quantity(real.status.allocatable[resource]) == want, (name, resource)
        assert node["metadata"]["labels"].items() <= (real.metadata.labels or {}).items(), name
        taints = [
            {"key": t.key, "value": t.value, "effect": t.effect} for t in real.spec.taints or []
        ]
        assert taints == node["spec"].get("taints", []), name
    capacities = [set(n.status.capacity) for n in listed.values()]
    assert any(GPU in c for c in capacities)
    assert any("nvidia.com/mig-1g.5gb" in c for c in capacities)
    assert any(SHARED_GPU in c for c in capacities)


def test_batch_job_is_admitted_by_kueue_runs_on_a_kwok_node_and_succeeds(kube, namespace, queue):
    batch = client.BatchV1Api(kube)
    batch.create_namespaced_job(
        namespace,
        objects.batch_job("train", namespace, queue, 2, annotations={"qm.test/duration": "3s"}),
    )
    workload = wait_for(
        lambda: next((w for w in _workloads(kube, namespace) if is_true(w, "Admitted")), None),
        what="Kueue to admit the Job's Workload",
    )
    assert workload["status"]["admission"]["podSetAssignments"][0]["resourceUsage"][GPU] == "2"
    running = wait_for(lambda: _running(kube, namespace, "train"), what="the Job's pod to run")
    node = client.CoreV1Api(kube).read_node(running[0].spec.node_name)
    assert node.metadata.labels[objects.POOL_LABEL] == "l4"
    assert node.metadata.annotations[kwok_nodes.KWOK_ANNOTATION] == "fake"
    assert _job(kube, namespace, "train").spec.suspend is False
    wait_for(
        lambda: _job_condition(kube, namespace, "train", "Complete"), what="the Job to complete"
    )
    (pod,) = _pods(kube, namespace, **{"job-name": "train"})
    assert pod.status.phase == "Succeeded"
    assert pod.status.container_statuses[0].state.terminated.exit_code == 0
    finished = next(w for w in _workloads(kube, namespace))
    assert is_true(finished, "Finished")


def test_pod_fails_with_the_exit_code_the_test_chose_and_the_job_retries(kube, namespace, queue):
    client.BatchV1Api(kube).create_namespaced_job(
        namespace,
        objects.batch_job(
            "crash",
            namespace,
            queue,
            1,
            annotations={"qm.test/exit-code": "3", "qm.test/duration": "1s"},
            backoff_limit=1,
        ),
    )
    failed = wait_for(
        lambda: _job_condition(kube, namespace, "crash", "Failed"), what="the Job to fail"
    )
    assert failed["reason"] == "BackoffLimitExceeded"
    pods = _pods(kube, namespace, **{"job-name": "crash"})
    assert len(pods) == 2  # the first attempt and its one retry
    for pod in pods:
        assert pod.status.phase == "Failed"
        terminated = pod.status.container_statuses[0].state.terminated
        assert (terminated.exit_code, terminated.reason) == (3, "Error")


def test_jobset_is_admitted_and_its_indexed_jobs_run(kube, namespace, queue):
    resource = ("jobset.x-k8s.io", "v1alpha2", namespace, "jobsets")
    js = objects.job_set("js", namespace, queue, workers=2, gpus=1, annotations=SHORT)
    client.CustomObjectsApi(kube).create_namespaced_custom_object(*resource, js)
    wait_for(_reaches(kube, resource, "js", "Completed"), what="the JobSet to complete")
    # Kueue marks its Workload Finished once it sees the JobSet complete, a moment later.
    (workload,) = wait_for(
        lambda: [w for w in _workloads(kube, namespace) if is_true(w, "Finished")],
        what="Kueue to finish the JobSet's Workload",
    )
    assert is_true(workload, "Admitted")
    pods = _pods(kube, namespace, **{"jobset.sigs.k8s.io/jobset-name": "js"})
    assert sorted(p.spec.hostname for p in pods) == ["js-workers-0-0", "js-workers-0-1"]
    assert {p.status.phase for p in pods} == {"Succeeded"}


def test_pytorchjob_is_admitted_and_its_replicas_run(kube, namespace, queue):
    resource = ("kubeflow.org", "v1", namespace, "pytorchjobs")
    job = objects.pytorch_job("pt", namespace, queue, workers=2, gpus=1, annotations=SHORT)
    client.CustomObjectsApi(kube).create_namespaced_custom_object(*resource, job)
    wait_for(_reaches(kube, resource, "pt", "Succeeded"), what="the PyTorchJob to succeed")
    (workload,) = _workloads(kube, namespace)
    assert is_true(workload, "Admitted")
    assert {ps["name"]: ps["count"] for ps in workload["spec"]["podSets"]} == {
        "master": 1,
        "worker": 2,
    }
    pods = _pods(kube, namespace, **{"training.kubeflow.org/job-name": "pt"})
    assert sorted(p.metadata.name for p in pods) == ["pt-master-0", "pt-worker-0", "pt-worker-1"]


def test_kueue_preempts_a_lower_priority_job_for_a_higher_one(kube, namespace, kueue_objects):
    flavor, cq = unique_name("l4"), unique_name("cq")
    low, high = unique_name("low"), unique_name("high")
    kueue_objects.create(objects.resource_flavor(flavor, "l4"))
    kueue_objects.create(objects.cluster_queue(cq, namespace, flavor, 4, preempt=True))
    kueue_objects.create(objects.local_queue("team", namespace, cq))
    kueue_objects.create(objects.priority_class(low, 10))
    kueue_objects.create(objects.priority_class(high, 1000))
    batch = client.BatchV1Api(kube)
    long_run = {"qm.test/duration": "10m"}
    batch.create_namespaced_job(
        namespace,
        objects.batch_job("low", namespace, "team", 4, annotations=long_run, priority=low),
    )
    wait_for(
        lambda: _running(kube, namespace, "low"),
        what="the low-priority Job to run",
    )
    batch.create_namespaced_job(
        namespace,
        objects.batch_job("high", namespace, "team", 4, annotations=long_run, priority=high),
    )
    wait_for(
        lambda: _running(kube, namespace, "high"),
        what="the high-priority Job to run",
    )
    by_job = {w["metadata"]["ownerReferences"][0]["name"]: w for w in _workloads(kube, namespace)}
    evicted = objects.conditions(by_job["low"]).get("Evicted", {})
    assert evicted.get("status") == "True" and evicted.get("reason") == "Preempted"
    assert not is_true(by_job["low"], "Admitted")
    assert _job(kube, namespace, "low").spec.suspend is True
    wait_for(
        lambda: not _pods(kube, namespace, **{"job-name": "low"}), what="the preempted pod to go"
    )


def test_visibility_api_lists_pending_workloads_through_the_aggregator(
    kube, namespace, kueue_objects
):
    flavor, cq = unique_name("l4"), unique_name("cq")
    kueue_objects.create(objects.resource_flavor(flavor, "l4"))
    kueue_objects.create(objects.cluster_queue(cq, namespace, flavor, 1))
    kueue_objects.create(objects.local_queue("team", namespace, cq))
    batch = client.BatchV1Api(kube)
    for name in ("first", "second"):
        batch.create_namespaced_job(
            namespace,
            objects.batch_job(name, namespace, "team", 1, annotations={"qm.test/duration": "10m"}),
        )
    path = f"/apis/visibility.kueue.x-k8s.io/v1beta2/clusterqueues/{cq}/pendingworkloads"

    def pending():
        response = kube.call_api("GET", kube.configuration.host + path)
        response.read()
        return json.loads(response.data)["items"] or None

    (item,) = wait_for(pending, what="a pending workload in the visibility API")
    assert item["metadata"]["ownerReferences"][0]["name"] == "second"
    assert (item["positionInClusterQueue"], item["localQueueName"]) == (0, "team")


def _series(dcgm_url: str, metric: str = "DCGM_FI_DEV_GPU_UTIL") -> list[dict[str, str]]:
    out = []
    for line in requests.get(dcgm_url, timeout=10).text.splitlines():
        if line.startswith(metric + "{"):
            body = line[len(metric) + 1 : line.rindex("}")]
            out.append(dict(part.split("=", 1) for part in _split_labels(body)))
    return [{k: v.strip('"') for k, v in labels.items()} for labels in out]


def _split_labels(body: str) -> list[str]:
    parts, current, quoted = [], "", False
    for char in body:
        if char == '"':
            quoted = not quoted
        if char == "," and not quoted:
            parts.append(current)
            current = ""
        else:
            current += char
    return [*parts, current] if current else parts


@pytest.mark.parametrize(
    ("pool", "resource", "count"),
    [
        ("l4", GPU, 2),
        ("a100-mig", "nvidia.com/mig-1g.5gb", 3),
        ("l4-shared", SHARED_GPU, 2),
    ],
)
def test_dcgm_exporter_attributes_the_devices_a_running_pod_holds(
    kube, namespace, real_cluster_info, pool, resource, count
):
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "holder",
            "namespace": namespace,
            "annotations": {"qm.test/duration": "10m"},
        },
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {objects.POOL_LABEL: pool},
            "containers": [
                {
                    "name": "trainer",
                    "image": "registry.example/trainer:1",
                    "resources": {"limits": {resource: str(count)}},
                }
            ],
        },
    }
    core = client.CoreV1Api(kube)
    core.create_namespaced_pod(namespace, pod)
    running = wait_for(
        lambda: (
            (p := core.read_namespaced_pod("holder", namespace)).status.phase == "Running" and p
        ),
        what="the pod to run",
    )

    def held():
        mine = [
            s
            for s in _series(real_cluster_info["dcgm_url"])
            if s.get("pod") == "holder" and s.get("namespace") == namespace
        ]
        return mine if len(mine) == count else None

    series = wait_for(held, timeout=30, what=f"{count} DCGM series of the pod's devices")
    assert {s["Hostname"] for s in series} == {running.spec.node_name}
    assert {s["container"] for s in series} == {"trainer"}
    keys = {(s["UUID"], s.get("GPU_I_ID"), s.get("vgpu")) for s in series}
    assert len(keys) == count  # distinct devices
    if resource.startswith("nvidia.com/mig-"):
        assert {s["GPU_I_PROFILE"] for s in series} == {"1g.5gb"}
    core.delete_namespaced_pod("holder", namespace)
    wait_for(
        lambda: (
            not [
                s
                for s in _series(real_cluster_info["dcgm_url"])
                if s.get("pod") == "holder" and s.get("namespace") == namespace
            ]
        ),
        timeout=30,
        what="the pod's series to lose its pod labels",
    )


def test_topology_aware_scheduling_places_a_job_in_one_rack(kube, namespace, kueue_objects):
    """Kueue's TAS over the a100 pool's rack labels (tainted nodes: the flavor tolerates)."""
    rack = "cloud.provider.com/topology-rack"
    topology, flavor, cq = unique_name("racks"), unique_name("a100"), unique_name("cq")
    custom = client.CustomObjectsApi(kube)
    custom.create_cluster_custom_object(
        *KUEUE,
        "topologies",
        {
            "apiVersion": "/".join(KUEUE),
            "kind": "Topology",
            "metadata": {"name": topology},
            "spec": {"levels": [{"nodeLabel": rack}, {"nodeLabel": "kubernetes.io/hostname"}]},
        },
    )
    kueue_objects.created.append(("topologies", topology))
    rf = objects.resource_flavor(flavor, "a100", tolerate_gpu_taint=True)
    rf["spec"]["topologyName"] = topology
    kueue_objects.create(rf)
    kueue_objects.create(objects.cluster_queue(cq, namespace, flavor, 32))
    kueue_objects.create(objects.local_queue("team", namespace, cq))
    job = objects.batch_job("tas", namespace, "team", 4, annotations={"qm.test/duration": "10m"})
    job["spec"].update({"parallelism": 4, "completions": 4, "completionMode": "Indexed"})
    job["spec"]["template"]["metadata"]["annotations"][
        "kueue.x-k8s.io/podset-required-topology"
    ] = rack
    client.BatchV1Api(kube).create_namespaced_job(namespace, job)
    running = wait_for(lambda: _running(kube, namespace, "tas", 4), what="the Job's 4 pods to run")
    core = client.CoreV1Api(kube)
    racks = {core.read_node(p.spec.node_name).metadata.labels[rack] for p in running}
    assert len(racks) == 1  # 16 GPUs in one rack of two 8-GPU nodes
    assert len({p.spec.node_name for p in running}) == 2
    (workload,) = _workloads(kube, namespace)
    assignment = workload["status"]["admission"]["podSetAssignments"][0]
    # Kueue records the placement by the lowest level (the nodes), which ungates the pods.
    assert assignment["topologyAssignment"]["levels"] == ["kubernetes.io/hostname"]


def test_the_api_servers_admission_applies_limit_ranges_and_resource_quotas(kube, namespace):
    core = client.CoreV1Api(kube)
    core.create_namespaced_limit_range(
        namespace,
        {
            "metadata": {"name": "defaults"},
            "spec": {
                "limits": [
                    {
                        "type": "Container",
                        "defaultRequest": {"cpu": "250m"},
                        "default": {"cpu": "1"},
                    }
                ]
            },
        },
    )
    core.create_namespaced_resource_quota(
        namespace, {"metadata": {"name": "pods"}, "spec": {"hard": {"pods": "1"}}}
    )
    # The quota controller must have counted the namespace before the quota is enforced.
    wait_for(
        lambda: (core.read_namespaced_resource_quota("pods", namespace).status.hard or {}).get(
            "pods"
        ),
        what="the ResourceQuota's status",
    )

    def pod(name):
        return {
            "metadata": {"name": name},
            "spec": {"containers": [{"name": "main", "image": "registry.example/app:1"}]},
        }

    created = core.create_namespaced_pod(namespace, pod("first"))
    resources = created.spec.containers[0].resources
    assert (resources.requests["cpu"], resources.limits["cpu"]) == ("250m", "1")
    with pytest.raises(client.ApiException) as refused:
        core.create_namespaced_pod(namespace, pod("second"))
    assert refused.value.status == 403
    assert "exceeded quota" in refused.value.body
