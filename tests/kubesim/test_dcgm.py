"""kubesim's DCGM exporter endpoint: Prometheus text, labels, utilisation, energy."""

import time
import urllib.request

from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from kubesim import dcgm
from kubesim import resources as R
from kubesim.fleet import load_fleet
from kubesim.store import Store
from tests.kubesim.kueue_helpers import GPU, GPU_TOLERATION, pod_phase, wait_for

REQUIRED = (
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
)


def _scrape(kubesim, node=None):
    url = kubesim.url + "/metrics/dcgm" + (f"/{node}" if node else "")
    with urllib.request.urlopen(url) as resp:
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = resp.read().decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def _samples(families, metric):
    # prometheus_client strips a counter's _total suffix only; the DCGM names have none.
    return families[metric].samples


def test_all_gpus_exported_with_dcgm_labels_and_no_pod_labels_when_idle(kubesim):
    families = _scrape(kubesim)
    for metric in REQUIRED:
        assert metric in families, metric
    assert families["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].type == "counter"
    assert families["DCGM_FI_DEV_GPU_UTIL"].documentation == "GPU utilization (in %)."
    util = _samples(families, "DCGM_FI_DEV_GPU_UTIL")
    assert len(util) == 2 * 8 + 2 * 4
    sample = next(
        s for s in util if s.labels["Hostname"] == "a100-node-1" and s.labels["gpu"] == "3"
    )
    assert sample.labels["modelName"] == "NVIDIA A100-SXM4-80GB"
    assert sample.labels["device"] == "nvidia3"
    assert sample.labels["UUID"].startswith("GPU-")
    assert sample.labels["pci_bus_id"].startswith("00000000:")
    assert sample.labels["DCGM_FI_DRIVER_VERSION"]
    node = client.CoreV1Api(kubesim_client(kubesim)).read_node("a100-node-1")
    assert sample.labels["UUID"] == node.metadata.annotations["kubesim.dev/gpu-uuids"].split(",")[3]
    for s in util:
        assert s.value == 0
        assert "pod" not in s.labels and "namespace" not in s.labels
    used = _samples(families, "DCGM_FI_DEV_FB_USED")
    assert all(s.value == 0 for s in used)


def kubesim_client(kubesim):
    from kubernetes import config

    return config.new_client_from_config(kubesim.kubeconfig)


def test_running_pod_labels_its_gpus_only_while_it_runs(kubesim, k8s, namespace):
    v1 = client.CoreV1Api(k8s)
    pod = {
        "metadata": {
            "name": "trainer",
            "annotations": {"kubesim.dev/duration-seconds": "1.5", "kubesim.dev/gpu-util": "50"},
        },
        "spec": {
            "restartPolicy": "Never",
            "tolerations": [GPU_TOLERATION],
            "nodeSelector": {"accelerator": "nvidia-a100-80gb"},
            "containers": [{"name": "train", "image": "x", "resources": {"limits": {GPU: "2"}}}],
        },
    }
    v1.create_namespaced_pod(namespace, pod)
    wait_for(lambda: pod_phase(v1, namespace, "trainer") == "Running")
    running = v1.read_namespaced_pod("trainer", namespace)
    held = set(running.metadata.annotations["kubesim.dev/gpu-uuids"].split(","))
    assert len(held) == 2

    families = _scrape(kubesim, running.spec.node_name)
    util = _samples(families, "DCGM_FI_DEV_GPU_UTIL")
    assert {s.labels["Hostname"] for s in util} == {running.spec.node_name}
    labelled = [s for s in util if "pod" in s.labels]
    assert {s.labels["UUID"] for s in labelled} == held
    for s in labelled:
        assert (s.labels["namespace"], s.labels["pod"], s.labels["container"]) == (
            namespace,
            "trainer",
            "train",
        )
        assert 35 <= s.value <= 65  # around the pod's kubesim.dev/gpu-util of 50 %
    for s in util:
        if "pod" not in s.labels:
            assert s.value == 0
    power = {s.labels["UUID"]: s.value for s in _samples(families, "DCGM_FI_DEV_POWER_USAGE")}
    idle = [v for u, v in power.items() if u not in held]
    assert min(power[u] for u in held) > max(idle)
    fb = {s.labels["UUID"]: s.value for s in _samples(families, "DCGM_FI_DEV_FB_USED")}
    assert all(fb[u] > 10_000 for u in held)
    engine = _samples(families, "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
    assert all(0 < s.value <= 1 for s in engine if "pod" in s.labels)

    wait_for(lambda: pod_phase(v1, namespace, "trainer") == "Succeeded")
    after = _samples(_scrape(kubesim), "DCGM_FI_DEV_GPU_UTIL")
    assert not any("pod" in s.labels for s in after)


def test_energy_counter_grows_monotonically(kubesim):
    def energy():
        families = _scrape(kubesim, "l4-node-0")
        return {
            s.labels["UUID"]: s.value
            for s in _samples(families, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
        }

    first = energy()
    kubesim.clock.advance(3)
    second = energy()
    assert first.keys() == second.keys() and len(first) == 4
    for uuid, value in first.items():
        assert second[uuid] > value


def test_unknown_node_has_no_series(kubesim):
    families = _scrape(kubesim, "no-such-node")
    assert all(not f.samples for f in families.values())


def test_rendering_ten_thousand_gpus_is_fast():
    store = Store()
    fleet = {"pools": [{"name": "big", "gpuModel": "NVIDIA H100 80GB HBM3", "nodes": 1250,
                        "gpusPerNode": 8}]}  # fmt: skip
    for node in load_fleet(fleet):
        store.create(R.NODES, node)
    dcgm.render(store)
    start = time.perf_counter()
    text = dcgm.render(store)
    elapsed = time.perf_counter() - start
    assert text.count("DCGM_FI_DEV_GPU_UTIL{") == 10_000
    assert elapsed < 3.0, f"rendering took {elapsed:.2f} s"


def test_utilisation_follows_the_annotation_including_zero():
    for base in (0.0, 30.0, 95.0):
        values = [dcgm.utilisation(base, "GPU-x", t * 7.0) for t in range(200)]
        assert min(values) >= 0 and max(values) <= 100
        assert abs(sum(values) / len(values) - base) < 3
    assert all(dcgm.utilisation(0.0, "GPU-y", t) == 0 for t in range(100))
