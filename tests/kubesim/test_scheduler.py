"""kubesim's scheduler: GPU bin-packing, selectors, taints, cordons, GPU assignment."""

from kubernetes import client

from tests.kubesim.kueue_helpers import GPU, GPU_TOLERATION, conditions_of, pod_phase, wait_for


def _pod(name, gpus, *, selector=None, tolerations=None, duration=60):
    spec = {
        "restartPolicy": "Never",
        "containers": [{"name": "main", "image": "x", "resources": {"limits": {GPU: str(gpus)}}}],
    }
    if selector:
        spec["nodeSelector"] = selector
    if tolerations:
        spec["tolerations"] = tolerations
    return {
        "metadata": {"name": name, "annotations": {"kubesim.dev/duration-seconds": str(duration)}},
        "spec": spec,
    }


def _bound_node(v1, namespace, name):
    return wait_for(lambda: v1.read_namespaced_pod(name, namespace).spec.node_name, message=name)


def test_pods_fill_the_fullest_node_that_fits(k8s, namespace):
    v1 = client.CoreV1Api(k8s)
    # Only the two untainted L4 nodes (4 GPUs each) are candidates for these pods.
    placements = {}
    for name, gpus in (("p1", 1), ("p2", 2), ("p3", 2), ("p4", 1)):
        v1.create_namespaced_pod(namespace, _pod(name, gpus))
        placements[name] = _bound_node(v1, namespace, name)
    assert placements == {
        "p1": "l4-node-0",
        "p2": "l4-node-0",  # the fuller node still fits 2
        "p3": "l4-node-1",  # l4-node-0 has only 1 GPU left
        "p4": "l4-node-0",  # best fit: the last GPU of l4-node-0
    }
    pod = v1.read_namespaced_pod("p2", namespace)
    assert pod.metadata.annotations["kubesim.dev/gpu-indices"] == "1,2"
    node = v1.read_node("l4-node-0")
    uuids = node.metadata.annotations["kubesim.dev/gpu-uuids"].split(",")
    assert pod.metadata.annotations["kubesim.dev/gpu-uuids"] == ",".join(uuids[1:3])
    scheduled = next(c for c in conditions_of(pod) if c.type == "PodScheduled")
    assert scheduled.status == "True"


def test_tainted_nodes_need_a_toleration(k8s, namespace):
    v1 = client.CoreV1Api(k8s)
    selector = {"accelerator": "nvidia-a100-80gb"}
    v1.create_namespaced_pod(namespace, _pod("intolerant", 1, selector=selector))

    def unschedulable():
        pod = v1.read_namespaced_pod("intolerant", namespace)
        for cond in conditions_of(pod):
            if cond.type == "PodScheduled" and cond.status == "False":
                return cond
        return None

    cond = wait_for(unschedulable, message="Unschedulable condition")
    assert cond.reason == "Unschedulable"
    assert cond.message == (
        "0/4 nodes are available: 2 node(s) didn't match Pod's node affinity/selector, "
        "2 node(s) had untolerated taint {nvidia.com/gpu: present}."
    )
    assert v1.read_namespaced_pod("intolerant", namespace).spec.node_name is None

    v1.create_namespaced_pod(
        namespace, _pod("tolerant", 1, selector=selector, tolerations=[GPU_TOLERATION])
    )
    assert _bound_node(v1, namespace, "tolerant").startswith("a100-node-")


def test_insufficient_gpus_and_cordoned_nodes(k8s, namespace):
    v1 = client.CoreV1Api(k8s)
    v1.create_namespaced_pod(namespace, _pod("too-big", 16, tolerations=[GPU_TOLERATION]))

    def message():
        pod = v1.read_namespaced_pod("too-big", namespace)
        return next((c.message for c in conditions_of(pod) if c.status == "False"), None)

    assert wait_for(message) == "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."

    v1.patch_node("l4-node-0", {"spec": {"unschedulable": True}})
    v1.create_namespaced_pod(namespace, _pod("after-cordon", 1))
    assert _bound_node(v1, namespace, "after-cordon") == "l4-node-1"


def test_deleted_pods_free_their_gpus_at_once(k8s, namespace):
    v1 = client.CoreV1Api(k8s)
    for i in range(2):
        v1.create_namespaced_pod(namespace, _pod(f"full-{i}", 4))
        _bound_node(v1, namespace, f"full-{i}")
    v1.create_namespaced_pod(namespace, _pod("waiting", 4))
    wait_for(lambda: conditions_of(v1.read_namespaced_pod("waiting", namespace)))
    assert v1.read_namespaced_pod("waiting", namespace).spec.node_name is None
    v1.delete_namespaced_pod("full-1", namespace)
    assert _bound_node(v1, namespace, "waiting") == "l4-node-1"


def test_pod_runs_for_its_duration_then_succeeds_or_fails(k8s, namespace):
    v1 = client.CoreV1Api(k8s)
    ok = _pod("ok", 1, duration=0.5)
    bad = _pod("bad", 1, duration=0.5)
    bad["metadata"]["annotations"]["kubesim.dev/exit-code"] = "3"
    v1.create_namespaced_pod(namespace, ok)
    v1.create_namespaced_pod(namespace, bad)
    wait_for(lambda: pod_phase(v1, namespace, "ok") == "Running")
    running = v1.read_namespaced_pod("ok", namespace).status.container_statuses[0]
    assert running.state.running.started_at is not None
    wait_for(lambda: pod_phase(v1, namespace, "ok") == "Succeeded")
    wait_for(lambda: pod_phase(v1, namespace, "bad") == "Failed")
    ok_state = v1.read_namespaced_pod("ok", namespace).status.container_statuses[0].state
    bad_state = v1.read_namespaced_pod("bad", namespace).status.container_statuses[0].state
    assert (ok_state.terminated.exit_code, ok_state.terminated.reason) == (0, "Completed")
    assert (bad_state.terminated.exit_code, bad_state.terminated.reason) == (3, "Error")
