"""kubesim serves pod logs as the API server does: the official client's read_namespaced_pod_log
with tailLines, timestamps, follow; 400 for a pod that has not started or a bad container."""

import json
import time

import pytest
from kubernetes import client as k8s
from kubernetes import config

from kubesim.testing import running_kubesim, wait_stepping
from tests.fixtures_cluster import CRDS_DIR, SIM_FLEET


def _pod(name, *, selector="nvidia-l4", seconds="4", code="0"):
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "annotations": {
            "kubesim.dev/duration-seconds": seconds, "kubesim.dev/exit-code": code}},
        "spec": {"nodeSelector": {"accelerator": selector}, "containers": [
            {"name": "worker", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }  # fmt: skip


@pytest.fixture(scope="module")
def sim():
    with running_kubesim(fleet=SIM_FLEET, crds_dir=CRDS_DIR) as sim:
        yield sim


@pytest.fixture(scope="module")
def core(sim):
    return k8s.CoreV1Api(config.new_client_from_config(config_file=sim.kubeconfig))


def _phase(core, name):
    return (core.read_namespaced_pod(name, "default").status or k8s.V1PodStatus()).phase


def test_a_running_pod_logs_start_up_then_training_steps(sim, core):
    core.create_namespaced_pod("default", _pod("trainer", seconds="30"))
    assert wait_stepping(lambda: _phase(core, "trainer") == "Running", timeout=0.5)
    text = core.read_namespaced_pod_log("trainer", "default")
    assert text.splitlines()[0] == "[rank 0] starting on l4-node-0 with 1 GPU(s)" or (
        text.splitlines()[0].startswith("[rank 0] starting on l4-node-")
    )
    sim.clock.advance(5)  # five seconds of training
    lines = core.read_namespaced_pod_log("trainer", "default", tail_lines=2).splitlines()
    assert len(lines) == 2 and all(line.startswith("step ") for line in lines)
    assert "loss=" in lines[-1] and "samples/s" in lines[-1]
    stamped = core.read_namespaced_pod_log("trainer", "default", tail_lines=1, timestamps=True)
    assert stamped[:4].isdigit() and "Z step " in stamped
    # Deterministic: the same lines on every read.
    assert core.read_namespaced_pod_log("trainer", "default", tail_lines=5) == (
        core.read_namespaced_pod_log("trainer", "default", tail_lines=5)
    )


def test_a_followed_log_streams_new_lines_until_the_pod_ends(sim, core):
    core.create_namespaced_pod("default", _pod("short", seconds="6", code="3"))
    # As with kubectl logs -f, the stream begins once the container has started (before, the
    # API server answers 400 "waiting to start"); on a busy machine that takes a moment.
    deadline = time.monotonic() + 10
    # Right after creation the pod may have no status yet: that is pending too.
    while (core.read_namespaced_pod("short", "default").status or k8s.V1PodStatus()).phase in (
        None,
        "Pending",
    ):
        assert time.monotonic() < deadline, "the pod did not start"
        time.sleep(0.05)
    started = time.monotonic()
    stream = core.read_namespaced_pod_log("short", "default", follow=True, _preload_content=False)
    arrivals = []
    with sim.faster(4):  # its six seconds pass in one and a half
        for chunk in stream.stream(1024):
            arrivals.append((time.monotonic() - started, chunk.decode()))
    text = "".join(c for _, c in arrivals)
    assert text.rstrip().splitlines()[-1].endswith("exit code 3")
    assert len(arrivals) >= 3  # lines came as they were written, not all at the end
    gaps = [b[0] - a[0] for a, b in zip(arrivals, arrivals[1:], strict=False)]
    assert max(gaps) < 2.0


@pytest.mark.parametrize(
    "kwargs, text",
    [({"container": "sidecar"}, "container sidecar is not valid"),
     ({"previous": True}, 'previous terminated container "worker"')],
)  # fmt: skip
def test_bad_log_requests_are_400_as_on_a_real_cluster(core, kwargs, text):
    if not [p for p in core.list_namespaced_pod("default").items if p.metadata.name == "idle"]:
        core.create_namespaced_pod("default", _pod("idle", seconds="600"))
    with pytest.raises(k8s.ApiException) as caught:
        core.read_namespaced_pod_log("idle", "default", **kwargs)
    assert caught.value.status == 400 and text in json.loads(caught.value.body)["message"]


def test_a_pod_that_has_not_started_has_no_log_yet(core):
    core.create_namespaced_pod("default", _pod("stuck", selector="no-such-node"))
    with pytest.raises(k8s.ApiException) as caught:
        core.read_namespaced_pod_log("stuck", "default")
    assert caught.value.status == 400
    assert json.loads(caught.value.body)["message"] == (
        'container "worker" in pod "stuck" is waiting to start: ContainerCreating'
    )
