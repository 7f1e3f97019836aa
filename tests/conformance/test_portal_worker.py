"""The whole loop through the REST API and a real Celery worker process, as deployed, against
the real control plane: a platform admin registers the cluster and defines a pool, the worker
syncs its inventory and reconciles; a team asks for quota, its manager approves, the worker
makes it the ClusterQueue's; a member submits jobs, the worker applies them, real Kueue admits
them, kwok runs their pods, and the status sync task (queued as the beat queues it) follows each
to its end while the API shows it; a cancelled job's objects are deleted by the worker.

Nothing here runs a task in the test's process: every task the portal queues travels over
Redis to the worker, which reads the cluster's kubeconfig from the Cluster row (as a worker
deployed beside the portal would) and writes to the test's database."""

from __future__ import annotations

import pytest
from kubernetes import client as k8s

from cluster import nodes as kwok_nodes
from cluster.testing import wait_for
from fleet.models import Node
from kueuemodel.resources import parse_quantity
from queues.models import Job, QuotaRequest
from tests.conformance.portal import (
    DURATION_ENV,
    EXIT_CODE_ENV,
    PortalWorld,
    gpu_model,
    pool_specs,
)

pytestmark = pytest.mark.slow
S = Job.State


@pytest.fixture
def worker(transactional_db, settings, tmp_path):
    """A real `celery worker` process; its log in a file (printed if the test fails)."""
    from tests.conftest import _celery_worker

    log = tmp_path / "worker.log"
    with log.open("w") as output, _celery_worker(settings, "--pool", "solo", output=output) as p:
        yield p
    print(log.read_text()[-20000:])  # pytest shows it with a failed test's captured output


@pytest.fixture
def world(real_cluster, real_cluster_info, kube, transactional_db):
    """Teams and users only: what the test does next goes through the API and the worker."""
    from fleet import kube as fleet_kube
    from tests.factories import (
        DepartmentFactory,
        MembershipFactory,
        TeamFactory,
        UserFactory,
        manager_of,
        platform_admin,
    )
    from tests.queues.builders import make_tiers

    portal = PortalWorld(kubeconfig=real_cluster, info=real_cluster_info, api=kube)
    portal.users["admin"] = platform_admin(f"admin-{portal.tag}")
    portal.tiers = make_tiers()
    dept = portal.department = DepartmentFactory(slug=f"c{portal.tag}")
    team = portal.teams["a"] = TeamFactory(slug=f"c{portal.tag}-a", department=dept,
                                           namespace=f"qm-c{portal.tag}-a")  # fmt: skip
    member = portal.users["a"] = UserFactory(username=f"a-{portal.tag}")
    MembershipFactory(user=member, team=team)
    portal.users["manager"] = manager_of(dept, f"manager-{portal.tag}")
    yield portal
    portal.teardown()
    fleet_kube.clear_client_cache()


def _submit(api, world, name, **spec):
    run, exit_code = spec.pop("run", "3s"), spec.pop("exit_code", None)
    env = {DURATION_ENV: run, **({EXIT_CODE_ENV: str(exit_code)} if exit_code else {})}
    response = api.post("/api/v1/jobs/", {
        "team": world.teams["a"].slug, "name": name, "image": "ghcr.io/acme/t:1",
        "command": ["python", "train.py"], "pool": "l4", "max_runtime_seconds": 600,
        "env": env, **spec,
    }, format="json")  # fmt: skip
    assert response.status_code == 201, response.json()
    return f"/api/v1/jobs/{response.json()['id']}/"


def _until(api, url, states, *, timeout=90, what=""):
    """Queue the status sync as the beat does, until the API shows the job in one of states."""
    from queues.tasks import sync_jobs

    def shown():
        sync_jobs.delay()
        job = api.get(url).json()
        return job if job["state"] in states else None

    return wait_for(shown, timeout=timeout, interval=1, what=what or f"{url} to reach {states}")


def test_the_portals_loop_through_the_api_and_a_real_worker(world, api, worker):
    admin, member, manager = (world.users[k] for k in ("admin", "a", "manager"))
    api.force_authenticate(admin)
    made = api.post("/api/v1/clusters/", {
        "name": "real", "kubeconfig_path": str(world.kubeconfig), "is_default": True,
        "dcgm_scrape_urls": [world.info["dcgm_url"]],
    }, format="json")  # fmt: skip
    assert made.status_code == 201, made.json()
    spec = pool_specs(kwok_nodes.read_fleet(world.info["fleet"]))["l4"]
    model = gpu_model(spec["gpu_model"])
    pool = api.post("/api/v1/pools/", {
        "cluster": "real", "name": "l4", "gpu_model": model.name,
        "node_selector": spec["node_selector"],
    }, format="json")  # fmt: skip
    assert pool.status_code == 201, pool.json()
    wait_for(lambda: Node.objects.filter(pool__name="l4").count() == 2, timeout=60,
             what="the worker's inventory sync")  # fmt: skip
    assert api.get(f"/api/v1/pools/{pool.json()['id']}/").json()["gpus"] == 8

    # A member asks for quota and the department's manager approves it (a member may not).
    api.force_authenticate(member)
    asked = api.post("/api/v1/quota-requests/", {
        "team": world.teams["a"].slug, "pool": pool.json()["id"], "nominal_gpus": 8,
        "justification": "first experiments",
    }, format="json")  # fmt: skip
    assert asked.status_code == 201, asked.json()
    approve = f"/api/v1/quota-requests/{asked.json()['id']}/approve/"
    assert api.post(approve, {}, format="json").status_code == 403
    api.force_authenticate(manager)
    decided = api.post(approve, {}, format="json")
    assert decided.status_code == 200, decided.json()
    wait_for(
        lambda: QuotaRequest.objects.get(pk=asked.json()["id"]).state == "applied",
        timeout=60, what="the worker to apply the approved quota",
    )  # fmt: skip
    cq = world.kueue("clusterqueues", f"qm-{world.teams['a'].slug}")
    (flavor,) = cq["spec"]["resourceGroups"][0]["flavors"]
    gpus = next(r for r in flavor["resources"] if r["name"] == "nvidia.com/gpu")
    assert parse_quantity(gpus["nominalQuota"]) == 8

    # Three jobs at once: one succeeds, a PyTorchJob fails after its retry, one is cancelled.
    api.force_authenticate(member)
    ok = _submit(api, world, "through the api", workers=2, gpus_per_worker=2)
    broken = _submit(api, world, "broken", kind="pytorchjob", workers=1, run="2s",
                     exit_code=2, retry_limit=1)  # fmt: skip
    stop = _submit(api, world, "stop me", run="10m")

    shown = _until(api, ok, {S.SUCCEEDED, S.FAILED}, what="the job to succeed via the worker")
    assert shown["state"] == S.SUCCEEDED, shown
    assert [p["phase"] for p in shown["pods"]] == ["Succeeded", "Succeeded"]
    assert {p["node_name"].startswith("l4-node-") for p in shown["pods"]} == {True}
    assert [t["to_state"] for t in shown["transitions"]][-3:] == [S.ADMITTED, S.RUNNING,
                                                                  S.SUCCEEDED]  # fmt: skip

    shown = _until(api, broken, {S.SUCCEEDED, S.FAILED}, what="the PyTorchJob to fail")
    assert shown["state"] == S.FAILED, shown
    assert shown["retries"] == 1
    assert "run again 1 time, the job's retry limit" in shown["exit_reason"]
    reasons = [t["reason"] for t in shown["transitions"]]
    assert any("exit code 2" in r and "retry 1 of 1" in r for r in reasons), reasons
    assert {p["exit_code"] for p in shown["pods"]} == {2}, shown["pods"]

    shown = _until(api, stop, {S.RUNNING}, what="the long job to run")
    k8s_name, job_id = shown["k8s_name"], shown["id"]
    cancelled = api.post(f"{stop}cancel/", {}, format="json")
    assert cancelled.status_code == 200, cancelled.json()
    assert cancelled.json()["state"] == S.CANCELLED
    batch, namespace = k8s.BatchV1Api(world.api), world.teams["a"].namespace

    def gone():
        jobs = {j.metadata.name for j in batch.list_namespaced_job(namespace).items}
        selector = f"quartermaster.dev/job-id={job_id}"
        return (
            k8s_name not in jobs
            and not world.core.list_namespaced_pod(namespace, label_selector=selector).items
        )

    wait_for(gone, timeout=60, what="the worker to delete the cancelled job's Job and pods")
    wait_for(
        lambda: _until(api, stop, {S.CANCELLED})["pods"][0]["finished_at"], timeout=30,
        what="the sync to close the cancelled job's pod",
    )  # fmt: skip
    assert worker.poll() is None, "the worker died"
