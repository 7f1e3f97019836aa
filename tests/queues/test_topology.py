"""Topology-aware placement from the portal: a pool describes its levels (rendered as a Kueue
Topology its ResourceFlavor names, valid against the CRDs and fixed once set, as Kueue
requires); a job asks to keep its workers within one rack, required or preferred; what could
never fit is refused at submission; in kubesim the job waits with a plain-language reason while
no rack has room, then runs inside one rack, which its page names."""

from contextlib import contextmanager

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from fleet.services.pools import pool_create, pool_update
from queues.backends import backend_for, backend_named
from queues.manifests.quotas import resource_flavor_manifest, topology_manifest
from queues.models import Job
from queues.selectors.jobs import pending_reason_text
from queues.services.jobs.apply import job_apply
from queues.services.reconcile import cluster_check_drift, cluster_desired_state, cluster_reconcile
from tests.crd_validation import assert_valid_manifest
from tests.fixtures_cluster import GPU_TAINT, SIM_FLEET, make_sim_cluster
from tests.queues.builders import (
    make_cluster,
    make_pool,
    run_tasks_eagerly,
    sim_jobs_setup,
    submit,
    sync_until,
)

RACK = "cloud.provider.com/topology-rack"
HOST = "kubernetes.io/hostname"
LEVELS = [{"name": "rack", "node_label": RACK}, {"name": "host", "node_label": HOST}]


def _errors(exc):
    return {k: " ".join(v) for k, v in exc.value.message_dict.items()}


def test_a_pools_topology_is_rendered_as_a_kueue_topology_its_flavor_names(db):
    pool = make_pool(make_cluster(), "a100", topology_levels=LEVELS)
    topology = topology_manifest(pool)
    assert topology["kind"] == "Topology" and topology["metadata"]["name"] == "a100"
    assert topology["spec"]["levels"] == [{"nodeLabel": RACK}, {"nodeLabel": HOST}]
    flavor = resource_flavor_manifest(pool)
    assert flavor["spec"]["topologyName"] == "a100"
    for manifest in (topology, flavor):
        assert_valid_manifest(manifest)
    kinds = [m["kind"] for _, _, m in cluster_desired_state(cluster=pool.cluster)]
    assert kinds.index("Topology") < kinds.index("ResourceFlavor")
    # A pool without levels has neither.
    plain = make_pool(pool.cluster, "l4")
    assert "topologyName" not in resource_flavor_manifest(plain)["spec"]
    rendered = backend_for(pool.cluster).cluster_objects(
        cluster=pool.cluster, pools=[plain], departments=[], teams=[], tiers=[], quotas=[]
    )
    assert all(m["kind"] != "Topology" for _, _, m in rendered)


@pytest.mark.parametrize(
    ("levels", "message"),
    [
        ({"rack": RACK}, "as a list, widest first"),
        ([{"name": "host", "node_label": HOST}, {"name": "rack", "node_label": RACK}],
         "kubernetes.io/hostname can only be the last"),
        ([{"name": "rack", "node_label": RACK}, {"name": "rack", "node_label": "x/y"}],
         "The level name 'rack' is given twice"),
        ([{"name": "Rack", "node_label": RACK}], "needs a short name"),
        ([{"name": "rack", "node_label": "not a label"}], "is not a valid node label key"),
        ([{"name": "rack"}], "must be an object with name and node_label"),
        ([{"name": f"l{i}", "node_label": f"x/l{i}"} for i in range(17)], "At most 16 levels"),
    ],
)  # fmt: skip
def test_topology_levels_are_checked_against_what_kueue_accepts(world, levels, message):
    cluster = make_cluster()
    model = make_pool(cluster, "a100").gpu_model
    with pytest.raises(ValidationError) as refused:
        pool_create(actor=world["admin"], cluster=cluster, name="h100", gpu_model=model,
                    node_selector={"accelerator": "h100"}, topology_levels=levels)  # fmt: skip
    assert message in _errors(refused)["topology_levels"]


def test_a_topology_pool_keeps_its_layout_and_volcano_pools_have_none(world):
    admin = world["admin"]
    cluster = make_cluster()
    model = make_pool(cluster, "l4").gpu_model
    pool = pool_create(actor=admin, cluster=cluster, name="a100", gpu_model=model,
                       node_selector={"accelerator": "a100"}, taints=[GPU_TAINT],
                       topology_levels=LEVELS)  # fmt: skip
    for change, field in (
        ({"topology_levels": LEVELS[:1]}, "topology_levels"),
        ({"node_selector": {"accelerator": "other"}}, "node_selector"),
        ({"taints": []}, "taints"),
    ):
        with pytest.raises(ValidationError) as refused:
            pool_update(actor=admin, pool=pool, **change)
        assert "fixed once its flavor exists" in _errors(refused)[field]
        pool.refresh_from_db()
    # What Kueue lets change still changes.
    assert pool_update(actor=admin, pool=pool, interconnect="nvlink").interconnect == "nvlink"
    volcano = make_cluster("vc", scheduler="volcano")
    with pytest.raises(ValidationError) as refused:
        pool_create(actor=admin, cluster=volcano, name="a100", gpu_model=model,
                    node_selector={"accelerator": "a100"}, topology_levels=LEVELS)  # fmt: skip
    assert "Topology-aware placement is Kueue's" in _errors(refused)["topology_levels"]


def test_the_pool_api_takes_levels_and_answers_400_with_what_to_fix(api, world):
    cluster = make_cluster()
    make_pool(cluster, "l4", gpu="NVIDIA L4")
    api.force_authenticate(world["admin"])
    body = {"cluster": cluster.name, "name": "a100", "gpu_model": "NVIDIA L4",
            "node_selector": {"accelerator": "a100"}}  # fmt: skip
    bad = api.post("/api/v1/pools/", {**body, "topology_levels": [{"name": "rack"}]},
                   format="json")  # fmt: skip
    assert bad.status_code == 400
    assert "name and node_label" in bad.json()["topology_levels"][0]
    made = api.post("/api/v1/pools/", {**body, "topology_levels": LEVELS}, format="json")
    assert made.status_code == 201, made.json()
    assert made.json()["topology_levels"] == LEVELS


@pytest.fixture
def topo_world(world):
    """vision's quota in an a100 pool (on an unreachable cluster) of two racks of two 4-GPU
    nodes, with rack and host levels."""
    from tests.queues.builders import make_quotas, make_tiers

    cluster = make_cluster(kubeconfig="/nonexistent")
    pools = {"a100": make_pool(cluster, "a100", nodes=4, gpus_per_node=4, topology_levels=LEVELS),
             "l4": make_pool(cluster, "l4", gpu="NVIDIA L4")}  # fmt: skip
    for node in pools["a100"].nodes.all():
        index = int(node.name.rsplit("-", 1)[1])
        node.labels = {RACK: f"rack-{index // 2}", HOST: node.name}
        node.save()
    make_quotas(world, pools)
    return {**world, "tiers": make_tiers(), "pools": pools, "cluster": cluster}


def test_a_job_asks_for_one_rack_and_the_manifest_carries_kueues_annotation(topo_world):
    job = submit(topo_world, workers=3, gpus_per_worker=2, topology_level="rack")
    assert (job.topology_level, job.topology_mode) == ("rack", "required")
    (batch,) = [m for m in backend_named("kueue").job_objects(job) if m["kind"] == "Job"]
    annotations = batch["spec"]["template"]["metadata"]["annotations"]
    assert annotations["kueue.x-k8s.io/podset-required-topology"] == RACK
    preferred = submit(topo_world, name="p", workers=2, gpus_per_worker=1,
                       topology_level="host", topology_mode="preferred")  # fmt: skip
    (batch,) = [m for m in backend_named("kueue").job_objects(preferred) if m["kind"] == "Job"]
    assert (
        batch["spec"]["template"]["metadata"]["annotations"][
            "kueue.x-k8s.io/podset-preferred-topology"
        ]
        == HOST
    )


@pytest.mark.parametrize(
    ("kind", "extra", "grouped"),
    [
        ("pytorchjob", {}, {"Master", "Worker"}),
        ("jobset", {"driver_command": ["python", "driver.py"]}, set()),
        ("jobset", {}, set()),
    ],
)
def test_a_pytorchjob_or_jobset_keeps_all_its_pods_in_one_domain(topo_world, kind, extra,
                                                                 grouped):  # fmt: skip
    """Kueue places each pod set by its own annotation: a PyTorchJob's master and workers are
    one group, placed in one domain; a JobSet's workers are one pod set, and its CPU driver is
    not placed with them."""
    job = submit(topo_world, kind=kind, workers=3, gpus_per_worker=2, topology_level="rack",
                 **extra)  # fmt: skip
    (obj,) = backend_named("kueue").job_objects(job)
    assert_valid_manifest(obj)
    if kind == "pytorchjob":
        templates = {n: r["template"] for n, r in obj["spec"]["pytorchReplicaSpecs"].items()}
    else:
        templates = {rj["name"]: rj["template"]["spec"]["template"]
                     for rj in obj["spec"]["replicatedJobs"]}  # fmt: skip
    for name, template in templates.items():
        level = template["metadata"]["annotations"].get("kueue.x-k8s.io/podset-required-topology")
        assert level == (None if name == "driver" else RACK), name
    in_group = {
        n
        for n, t in templates.items()
        if t["metadata"]["annotations"].get("kueue.x-k8s.io/podset-group-name")
    }
    assert in_group == grouped


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"topology_level": "row"}, "topology_level", "has no level 'row'; its levels: rack, host"),
        ({"topology_level": "rack", "pool": None}, "topology_level", "Choose a pool"),
        ({"topology_level": "rack", "pool": "l4"}, "topology_level", "describes no topology"),
        ({"topology_level": "rack", "topology_mode": "always"}, "topology_mode", "required"),
        ({"topology_level": "rack", "workers": 5, "gpus_per_worker": 2}, "topology_level",
         "At most 4 workers of 2 GPUs fit within one rack of pool a100, so this job could "
         "never start"),
        ({"topology_level": "host", "workers": 2, "gpus_per_worker": 4}, "topology_level",
         "At most 1 workers of 4 GPUs fit within one host"),
    ],
)  # fmt: skip
def test_placement_that_cannot_work_is_refused_with_what_to_fix(topo_world, overrides, field,
                                                                message):  # fmt: skip
    before = Job.objects.count()
    with pytest.raises(ValidationError) as refused:
        submit(topo_world, **{"workers": 2, "gpus_per_worker": 2, **overrides})
    assert message in _errors(refused)[field]
    assert Job.objects.count() == before


def test_the_api_submits_a_placement_and_shows_it(api, topo_world):
    api.force_authenticate(topo_world["alice"])
    body = {"team": "vision", "name": "ring", "image": "ghcr.io/acme/train:1.0",
            "command": ["torchrun", "train.py"], "workers": 3, "gpus_per_worker": 2,
            "pool": "a100", "max_runtime_seconds": 600}  # fmt: skip
    bad = api.post("/api/v1/jobs/", {**body, "topology_level": "row"}, format="json")
    assert bad.status_code == 400 and "its levels: rack, host" in bad.json()["topology_level"][0]
    made = api.post("/api/v1/jobs/", {**body, "topology_level": "rack",
                                      "topology_mode": "preferred"}, format="json")  # fmt: skip
    assert made.status_code == 201, made.json()
    assert (made.json()["topology_level"], made.json()["topology_mode"]) == ("rack", "preferred")


# Four 4-GPU A100 nodes in two racks (nodes 0-1, 2-3), and the usual L4 pool.
TOPOLOGY_FLEET = {
    "pools": [
        {**SIM_FLEET["pools"][0], "nodes": 4, "gpusPerNode": 4,
         "topology": [{"label": RACK, "domains": 2}]},
        SIM_FLEET["pools"][1],
    ]
}  # fmt: skip


@contextmanager
def topology_sim(world):
    """kubesim with TOPOLOGY_FLEET, the a100 pool's rack and host levels, quotas reconciled."""
    with make_sim_cluster(fleet=TOPOLOGY_FLEET) as sim:
        pool = sim.pools["a100"]
        pool.topology_levels = LEVELS
        pool.save()
        sim.sync()
        yield sim_jobs_setup(world, sim)


@pytest.fixture
def sim_topology(world):
    with topology_sim(world) as sim:
        yield sim


def _cordon(sim, node, value):
    sim["sim"].kube.patch("v1", "Node", node, {"spec": {"unschedulable": value}})


def test_a_rack_job_waits_for_a_rack_with_room_then_runs_inside_it(sim_topology, client):
    sim = sim_topology
    kube = sim["sim"].kube
    topology = kube.get("kueue.x-k8s.io/v1beta2", "Topology", "a100")
    assert topology["spec"]["levels"] == [{"nodeLabel": RACK}, {"nodeLabel": HOST}]
    flavor = kube.get("kueue.x-k8s.io/v1beta2", "ResourceFlavor", "a100")
    assert flavor["spec"]["topologyName"] == "a100"
    # One node of each rack is cordoned: 4 GPUs free per rack, 8 in all.
    _cordon(sim, "a100-node-0", True)
    _cordon(sim, "a100-node-2", True)
    job = submit(sim, workers=3, gpus_per_worker=2, topology_level="rack")
    assert job_apply(job_id=job.pk) == "applied"
    job = sync_until(job, Job.State.QUEUED)
    job = sync_until(job, Job.State.QUEUED, timeout=2)
    assert job.state == Job.State.QUEUED
    assert "within one rack of pool a100" in job.pending_reason
    assert "allows to fit only 2 out of 3 pod(s)" in job.pending_reason
    # Rack 0 gets its node back: the job is admitted there and all its workers run in it.
    _cordon(sim, "a100-node-0", False)
    job = sync_until(job, Job.State.RUNNING)
    assert job.state == Job.State.RUNNING
    nodes = {p.node_name for p in job.pods.all()}
    assert nodes and nodes <= {"a100-node-0", "a100-node-1"}
    client.force_login(sim["alice"])
    page = client.get(reverse("job-detail", args=[job.pk])).content.decode()
    assert "Workers within one rack (required); ran in a100-rack-0" in page


def test_the_why_pending_text_names_the_topology(topo_world):
    job = submit(topo_world, workers=3, gpus_per_worker=2, topology_level="rack")
    text = pending_reason_text(job=job, message='couldn\'t assign flavors to pod set main: '
                               'topology "a100" allows to fit only 2 out of 3 pod(s)')  # fmt: skip
    assert text.startswith("Waiting for room to place its 3 workers within one rack of pool a100")
    assert "(Kueue: couldn't assign flavors" in text


def test_a_deleted_topology_is_put_back_and_goes_with_its_cluster(
    sim_topology, api_as, monkeypatch, django_capture_on_commit_callbacks
):
    run_tasks_eagerly(monkeypatch)
    kube, cluster = sim_topology["sim"].kube, sim_topology["cluster"]
    topology = ("kueue.x-k8s.io/v1beta2", "Topology", "a100")
    kube.delete(*topology)
    assert cluster_check_drift(cluster_id=cluster.pk)["drifted"]
    cluster_reconcile(cluster_id=cluster.pk)
    assert kube.get(*topology)["spec"]["levels"][0] == {"nodeLabel": RACK}
    with django_capture_on_commit_callbacks(execute=True):
        deleted = api_as(sim_topology["admin"]).delete(f"/api/v1/clusters/{cluster.pk}/")
    assert deleted.status_code == 204
    assert not kube.list("kueue.x-k8s.io/v1beta2", "Topology")


def test_the_domain_a_job_ran_in_is_its_workers_not_its_jobset_driver(topo_world):
    from queues.selectors.jobs import job_domains
    from tests.factories import JobPodFactory

    job = submit(topo_world, kind="jobset", workers=2, gpus_per_worker=2, topology_level="rack",
                 driver_command=["python", "driver.py"])  # fmt: skip
    job.k8s_name = "set-1"
    job.save()
    pods = {"set-1-workers-0-0-x": "a100-node-0", "set-1-workers-1-0-y": "a100-node-1",
            "set-1-driver-0-0-z": "a100-node-3"}  # fmt: skip
    for name, node in pods.items():
        JobPodFactory(job=job, name=name, node_name=node)
    assert job_domains(job=job) == ["rack-0"]
