"""Spot capacity in kubesim: a reclaimed spot node gets notice (a taint and a condition), its
pods are stopped as by a graceful node shutdown (DisruptionTarget), a Job whose
podFailurePolicy ignores disruptions replaces them without counting a failure, the capacity
comes back, and a pod that checkpoints to a volume resumes with the work it had left while one
that does not starts over. Seeded random interruptions are reproducible."""

import pytest
from kubernetes import client, config

from kubesim.fleet import load_fleet
from kubesim.testing import running_kubesim
from tests.kubesim.conftest import CRDS_DIR
from tests.kubesim.kueue_helpers import wait_for

SPOT_FLEET = {
    "pools": [
        {"name": "spot", "gpuModel": "NVIDIA L4", "nodes": 1, "gpusPerNode": 4,
         "labels": {"accelerator": "nvidia-l4"}, "spot": True},
    ]
}  # fmt: skip
DURATION = 20  # simulated seconds of work per pod
IGNORE_DISRUPTIONS = {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}


def _job(name, *, checkpoint):
    container = {"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    toleration = {"key": "cloud.google.com/gke-spot", "operator": "Exists"}
    spec = {"restartPolicy": "Never", "containers": [container], "tolerations": [toleration]}
    if checkpoint:
        container["env"] = [{"name": "CHECKPOINT_DIR", "value": "/ckpt/run"}]
        container["volumeMounts"] = [{"name": "ckpt", "mountPath": "/ckpt"}]
        spec["volumes"] = [{"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpt"}}]
    return {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {"backoffLimit": 0, "completions": 1, "parallelism": 1,
                 "completionMode": "Indexed",
                 "podFailurePolicy": {"rules": [IGNORE_DISRUPTIONS]},
                 "template": {"metadata": {"annotations": {
                     "kubesim.dev/duration-seconds": str(DURATION)}}, "spec": spec}},
    }  # fmt: skip


@pytest.fixture
def spot():
    with running_kubesim(fleet=SPOT_FLEET, crds_dir=CRDS_DIR, time_scale=10.0) as sim:
        api = config.new_client_from_config(sim.kubeconfig)
        sim.core, sim.batch = client.CoreV1Api(api), client.BatchV1Api(api)
        yield sim
        api.close()


def test_a_reclaimed_node_stops_its_pods_and_a_checkpointing_pod_resumes(spot):
    core, batch = spot.core, spot.batch
    core.create_namespaced_persistent_volume_claim("default", {
        "metadata": {"name": "ckpt"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    })  # fmt: skip
    batch.create_namespaced_job("default", _job("resumes", checkpoint=True))
    batch.create_namespaced_job("default", _job("restarts", checkpoint=False))

    def running(job):
        pods = core.list_namespaced_pod("default", label_selector=f"job-name={job}").items
        return [p for p in pods if p.status.phase == "Running"]

    wait_for(lambda: running("resumes") and running("restarts"), message="both running")
    spot.clock.advance(8)  # 8 simulated seconds of work
    assert spot.interrupt("spot-node-0", notice=2, down=3)
    node = core.read_node("spot-node-0")
    assert any(t.key == "cloud.google.com/impending-node-termination" for t in node.spec.taints)
    assert any(c.type == "TerminationNotice" and c.status == "True"
               for c in node.status.conditions)  # fmt: skip
    stopped = wait_for(lambda: [p for p in core.list_namespaced_pod("default").items
                                if p.status.phase == "Failed"], message="pods stopped")  # fmt: skip
    for pod in stopped:
        cond = next(c for c in pod.status.conditions if c.type == "DisruptionTarget")
        assert cond.reason == "TerminationByKubelet"
        assert pod.status.message == "Pod was terminated in response to imminent node shutdown."
    claim = core.read_namespaced_persistent_volume_claim("ckpt", "default")
    (done,) = [float(v) for k, v in claim.metadata.annotations.items()
               if k.startswith("kubesim.dev/checkpoint-")]  # fmt: skip
    assert 5 <= done <= DURATION
    # The node comes back; both jobs run again and finish, no failure counted.
    for job in ("resumes", "restarts"):
        wait_for(lambda j=job: (batch.read_namespaced_job(j, "default").status.succeeded or 0)
                 == 1, timeout=20, message=f"{job} done")  # fmt: skip
        assert not batch.read_namespaced_job(job, "default").status.failed

    def second_run(job):
        pods = core.list_namespaced_pod("default", label_selector=f"job-name={job}").items
        (pod,) = [p for p in pods if p.status.phase == "Succeeded"]
        state = pod.status.container_statuses[0].state.terminated
        return state.finished_at.timestamp() - state.started_at.timestamp()

    assert second_run("resumes") <= DURATION - done + 2  # the work left
    assert second_run("restarts") >= DURATION - 1  # all of it again
    node = core.read_node("spot-node-0")
    assert [t.key for t in node.spec.taints] == ["cloud.google.com/gke-spot"]  # notice gone
    assert all(c.type != "TerminationNotice" for c in node.status.conditions)


def test_random_interruptions_follow_their_seed():
    fleet = {"pools": [{**SPOT_FLEET["pools"][0], "nodes": 2,
                        "interruptions": {"meanSeconds": 5, "seed": 7}}]}  # fmt: skip
    annotations = [n["metadata"]["annotations"] for n in load_fleet(fleet)]
    assert all('"seed": 7' in a["kubesim.dev/spot-interruptions"] for a in annotations)
    firsts = []
    for _ in range(2):
        with running_kubesim(fleet=fleet, crds_dir=CRDS_DIR) as sim:
            from kubesim.controllers import running

            plans = running(sim.store).spot.plans
            wait_for(lambda p=plans: len(p) == 2, message="plans")
            # Each node's generator is seeded from the plan's seed and its name.
            firsts.append([round(plans[n][1].random(), 9) for n in sorted(plans)])
    assert firsts[0] == firsts[1]
