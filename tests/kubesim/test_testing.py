"""kubesim.testing, what the suite stands on: a kubesim shared by tests is reset between them to
how it started (nothing a test wrote, no watch, no fault, fresh controllers and clock), and a
test steps the simulated clock to the next thing due instead of sleeping until then."""

import http.client
import json
import time
import urllib.request

import pytest
from kubernetes import client, config

from kubesim import resources
from kubesim.clock import Clock
from kubesim.testing import KubesimPool, running_kubesim, wait_stepping
from tests.kubesim.conftest import CRDS_DIR, SMALL_FLEET

GPU = "nvidia.com/gpu"


def _pod(name, *, duration, gpus=1):
    return {
        "metadata": {"name": name, "annotations": {"kubesim.dev/duration-seconds": str(duration)}},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"accelerator": "nvidia-l4"},
            "containers": [
                {"name": "main", "image": "x", "resources": {"limits": {GPU: str(gpus)}}}
            ],
        },
    }


def _phase(v1, name):
    status = v1.read_namespaced_pod(name, "default").status
    return status.phase if status else None


@pytest.fixture
def pool():
    with KubesimPool(crds_dir=CRDS_DIR) as pool:
        yield pool


def test_a_checked_out_kubesim_is_reset_to_its_fleet(pool):
    with pool.checkout(fleet=SMALL_FLEET) as sim:
        api = config.new_client_from_config(sim.kubeconfig)
        v1 = client.CoreV1Api(api)
        fresh_rv = v1.list_node().metadata.resource_version
        v1.create_namespace({"metadata": {"name": "team-a"}})
        v1.patch_node("l4-node-0", {"spec": {"unschedulable": True}})
        v1.create_namespaced_pod("default", _pod("left-over", duration=600))
        client.SchedulingV1Api(api).create_priority_class(
            {"metadata": {"name": "urgent"}, "value": 1000}
        )
        assert wait_stepping(lambda: _phase(v1, "left-over") == "Running", timeout=5)
        sim.clock.advance(3600)
        sim.inject_faults(5)
        first = (sim.port, sim.store, sim.controllers)
        api.close()

    with pool.checkout(fleet=SMALL_FLEET) as sim:
        # The same server, serving a new store and new controllers.
        assert sim.port == first[0]
        assert sim.store is not first[1] and sim.controllers is not first[2]
        assert pool.started == 1 and pool.checkouts == 2
        api = config.new_client_from_config(sim.kubeconfig)
        v1 = client.CoreV1Api(api)
        nodes = v1.list_node()
        assert sorted(n.metadata.name for n in nodes.items) == [
            "a100-node-0",
            "a100-node-1",
            "l4-node-0",
            "l4-node-1",
        ]
        assert not any(n.spec.unschedulable for n in nodes.items)
        assert nodes.metadata.resource_version == fresh_rv
        assert "team-a" not in [n.metadata.name for n in v1.list_namespace().items]
        assert v1.list_pod_for_all_namespaces().items == []
        assert client.SchedulingV1Api(api).list_priority_class().items == []
        # The clock starts at now again, and no injected fault is left: a write succeeds.
        assert abs(sim.clock.timestamp() - time.time()) < 60
        v1.create_namespaced_pod("default", _pod("next", duration=60))
        assert wait_stepping(lambda: _phase(v1, "next") == "Running", timeout=5)
        api.close()


def test_a_reset_ends_the_watches_of_the_test_before(pool):
    with pool.checkout(controllers=False) as sim:
        url = f"{sim.url}/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=30"
        stream = urllib.request.urlopen(url)  # noqa: S310 (kubesim on 127.0.0.1)
        assert sim.store.watch_count() == 1
    with pool.checkout(controllers=False) as sim:
        # The old watch was hung up on: its stream ends (long before its 30 s), and it never
        # sees what the next test writes.
        v1 = client.CoreV1Api(config.new_client_from_config(sim.kubeconfig))
        v1.create_namespaced_config_map("default", {"metadata": {"name": "mine"}})
        try:
            seen = stream.read()
        except http.client.IncompleteRead as hung_up:
            seen = hung_up.partial
        events = [json.loads(line) for line in seen.splitlines() if line.strip()]
        assert all(e["object"]["metadata"]["name"] != "mine" for e in events)
        assert sim.store.watch_count() == 0
        v1.api_client.close()


def test_a_kubesim_in_use_is_not_handed_out_twice(pool):
    with pool.checkout(fleet=SMALL_FLEET) as east, pool.checkout(fleet=SMALL_FLEET) as west:
        assert east.port != west.port and east.store is not west.store
    with pool.checkout(fleet=SMALL_FLEET) as again:
        assert again.port in (east.port, west.port)
    # Another fleet is another kubesim.
    with pool.checkout(fleet={"pools": [SMALL_FLEET["pools"][1]]}) as other:
        assert other.port not in (east.port, west.port)
        assert len(other.store.list(resources.NODES)) == 2
    assert pool.started == 3


def test_a_kubesim_whose_server_a_test_stopped_is_not_reused(pool):
    with pool.checkout(controllers=False) as sim:
        sim.cluster.server.stop()
        stopped = sim.port
    with pool.checkout(controllers=False) as sim:
        assert sim.port != stopped
        v1 = client.CoreV1Api(config.new_client_from_config(sim.kubeconfig))
        assert v1.list_namespace().items
        v1.api_client.close()


def test_a_kubesim_at_rest_does_not_run_its_controllers(pool):
    with pool.checkout(fleet=SMALL_FLEET) as sim:
        held = sim.cluster
        assert held.controllers is not None
    assert held.controllers is None


def test_settle_runs_what_is_due_now_and_step_jumps_to_what_is_due_next():
    with running_kubesim(fleet=SMALL_FLEET, crds_dir=CRDS_DIR) as sim:
        api = config.new_client_from_config(sim.kubeconfig)
        v1 = client.CoreV1Api(api)
        # No background thread: only settle() and step() move things.
        controllers = sim.controllers
        controllers.stopped.set()
        controllers.wake.set()
        controllers.thread.join()
        v1.create_namespaced_pod("default", _pod("short", duration=60))
        v1.create_namespaced_pod("default", _pod("long", duration=600))
        assert v1.read_namespaced_pod("short", "default").spec.node_name is None
        start = sim.clock.timestamp()
        sim.settle()
        assert (_phase(v1, "short"), _phase(v1, "long")) == ("Running", "Running")

        jump = sim.step()
        assert 55 < jump <= 60
        assert (_phase(v1, "short"), _phase(v1, "long")) == ("Succeeded", "Running")
        assert 60 <= sim.clock.timestamp() - start < 65
        assert 530 < sim.step() <= 540
        assert _phase(v1, "long") == "Succeeded"
        # Nothing is due any more.
        assert sim.step() is None
        api.close()


def test_wait_stepping_sees_every_state_on_the_way():
    with running_kubesim(fleet=SMALL_FLEET, crds_dir=CRDS_DIR) as sim:
        api = config.new_client_from_config(sim.kubeconfig)
        v1 = client.CoreV1Api(api)
        v1.create_namespaced_pod("default", _pod("train", duration=30))
        # Running is seen before the half minute is stepped over, then the end after it.
        start = time.monotonic()
        assert wait_stepping(lambda: _phase(v1, "train") == "Running", timeout=40)
        assert sim.clock.timestamp() - time.time() < 1
        assert wait_stepping(lambda: _phase(v1, "train") == "Succeeded", timeout=40)
        assert sim.clock.timestamp() - time.time() >= 30 - 5
        assert time.monotonic() - start < 5
        # A condition that never holds fails after its real timeout, with None.
        assert wait_stepping(lambda: _phase(v1, "train") == "Failed", timeout=0.3) is None
        api.close()


def test_wait_stepping_sees_no_further_than_its_timeout():
    with running_kubesim(fleet=SMALL_FLEET, crds_dir=CRDS_DIR) as sim:
        api = config.new_client_from_config(sim.kubeconfig)
        v1 = client.CoreV1Api(api)
        v1.create_namespaced_pod("default", _pod("minute", duration=60))
        v1.create_namespaced_pod("default", _pod("hour", duration=3600))
        # A second of waiting would not have seen the minute end, and does not.
        start = time.monotonic()
        assert wait_stepping(lambda: _phase(v1, "minute") == "Succeeded", timeout=1) is None
        assert time.monotonic() - start >= 1
        assert _phase(v1, "minute") == "Running"
        # Two minutes would have: it ends, the hour does not.
        assert wait_stepping(lambda: _phase(v1, "minute") == "Succeeded", timeout=120)
        assert _phase(v1, "hour") == "Running"
        api.close()


def test_a_rescaled_clock_runs_on_from_where_it_was():
    clock = Clock()
    clock.advance(100)
    before = clock.timestamp()
    clock.rescale(100)
    assert 0 <= clock.timestamp() - before < 1  # no jump, the advance kept
    time.sleep(0.05)
    assert clock.timestamp() - before >= 5
    clock.rescale(1)
    after = clock.timestamp()
    time.sleep(0.05)
    assert 0 < clock.timestamp() - after < 1
    with pytest.raises(ValueError):
        clock.rescale(0)
