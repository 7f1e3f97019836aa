"""The reconciler against kubesim through the real client (fleet.kube)."""

import json
import threading

import pytest
from django.core.exceptions import ValidationError
from django.db import connection, transaction

from fleet import kube
from fleet.models import Cluster
from kubesim.server import _Handler
from queues import tasks
from queues.backends import kueue as kueue_backend
from queues.models import AuditEvent, Job, ManagedObject, Quota
from queues.services import quotas as quota_services
from queues.services import reconcile, tenancy
from tests.factories import ClusterFactory, ManagedObjectFactory
from tests.queues.builders import make_tiers

CQ_API = "kueue.x-k8s.io/v1beta2"


@pytest.fixture
def reconciled(world, sim_cluster, settings):
    settings.KUBE_MAX_ATTEMPTS = 1
    make_tiers("production", "experiment")
    Quota.objects.create(
        team=world["vision"], pool=sim_cluster.pools["a100"], nominal_gpus=8, borrowing_limit=4
    )
    Quota.objects.create(team=world["nlp"], pool=sim_cluster.pools["l4"], nominal_gpus=4)
    result = reconcile.cluster_reconcile(cluster_id=sim_cluster.cluster.pk)
    return {**world, "sim": sim_cluster, "first": result}


def _cq(sim, name="qm-vision"):
    return sim.kube.get(CQ_API, "ClusterQueue", name)


def test_reconcile_creates_every_object(reconciled):
    sim = reconciled["sim"]
    rows = list(ManagedObject.objects.filter(cluster=sim.cluster))
    # 2 flavors, 2 cohorts, 3 teams × 8 objects (namespace, its 5 guard rails, queues), 2 tiers.
    assert len(rows) == 30
    assert reconciled["first"] == {"applied": 30}
    assert all(r.applied_generation == r.desired_generation == 1 for r in rows)
    assert all(r.last_error == "" for r in rows)
    cq = _cq(sim)
    flavor = cq["spec"]["resourceGroups"][0]["flavors"][0]
    assert flavor["name"] == "a100"
    assert str(flavor["resources"][-1]["nominalQuota"]) == "8"
    assert cq["spec"]["cohortName"] == "qm-research"
    lq = sim.kube.get(CQ_API, "LocalQueue", "vision", reconciled["vision"].namespace)
    assert lq["spec"]["clusterQueue"] == "qm-vision"
    assert sim.kube.get("v1", "Namespace", reconciled["vision"].namespace) is not None
    assert sim.kube.get(CQ_API, "WorkloadPriorityClass", "production")["value"] == 1000
    apply_events = AuditEvent.objects.filter(verb="managed_object.apply")
    assert apply_events.count() == 30
    assert "nominalQuota: 8" in apply_events.get(object_repr="ClusterQueue qm-vision").manifest_diff


def test_second_reconcile_is_a_no_op(reconciled):
    sim = reconciled["sim"]
    version = _cq(sim)["metadata"]["resourceVersion"]
    assert reconcile.cluster_reconcile(cluster_id=sim.cluster.pk) == {}
    # Applying the same manifest again (a redelivered task) changes nothing in the cluster.
    row = ManagedObject.objects.get(kind="ClusterQueue", name="qm-vision")
    ManagedObject.objects.filter(pk=row.pk).update(applied_generation=0)
    assert reconcile.managed_object_apply(object_id=row.pk) == "applied"
    assert _cq(sim)["metadata"]["resourceVersion"] == version


def test_quota_change_bumps_generation_and_applies(reconciled):
    sim = reconciled["sim"]
    Quota.objects.filter(team=reconciled["vision"]).update(nominal_gpus=12)
    # The ClusterQueue, and the namespace's ResourceQuota that follows the team's ceiling.
    assert reconcile.cluster_reconcile(cluster_id=sim.cluster.pk) == {"applied": 2}
    row = ManagedObject.objects.get(kind="ClusterQueue", name="qm-vision")
    assert row.desired_generation == row.applied_generation == 2
    nominal = _cq(sim)["spec"]["resourceGroups"][0]["flavors"][0]["resources"][-1]["nominalQuota"]
    assert str(nominal) == "12"
    event = AuditEvent.objects.filter(verb="managed_object.apply").first()
    assert "-        nominalQuota: 8" in event.manifest_diff
    assert "+        nominalQuota: 12" in event.manifest_diff


def test_drift_is_repaired_and_audited(reconciled):
    sim = reconciled["sim"]
    # Someone edits the ClusterQueue by hand (another field manager) and deletes a LocalQueue.
    cq = _cq(sim)
    cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][-1]["nominalQuota"] = 64
    sim.kube.patch(CQ_API, "ClusterQueue", "qm-vision", {"spec": cq["spec"]})
    sim.kube.delete(CQ_API, "LocalQueue", "nlp", reconciled["nlp"].namespace)
    result = reconcile.cluster_check_drift(cluster_id=sim.cluster.pk)
    assert len(result["drifted"]) == 2
    assert reconcile.cluster_reconcile(cluster_id=sim.cluster.pk) == {"applied": 2}
    flavor = _cq(sim)["spec"]["resourceGroups"][0]["flavors"][0]
    assert str(flavor["resources"][-1]["nominalQuota"]) == "8"
    assert sim.kube.get(CQ_API, "LocalQueue", "nlp", reconciled["nlp"].namespace) is not None
    drift = AuditEvent.objects.get(
        verb="managed_object.drift", object_repr="ClusterQueue qm-vision"
    )
    assert "nominalQuota: 64" in drift.manifest_diff and "nominalQuota: 8" in drift.manifest_diff
    # Once repaired, nothing drifts.
    assert reconcile.cluster_check_drift(cluster_id=sim.cluster.pk)["drifted"] == []


def test_permanent_error_is_stored(reconciled, monkeypatch):
    sim = reconciled["sim"]
    original = kueue_backend.cluster_queue_manifest

    def broken(team, quotas, **kw):
        manifest = original(team, quotas, **kw)
        manifest["spec"]["queueingStrategy"] = "Whenever"
        return manifest

    monkeypatch.setattr(kueue_backend, "cluster_queue_manifest", broken)
    pool = sim.pools["a100"]
    pool.allow_oversubscription = True  # no inventory sync here, so no capacity figures
    pool.save()
    request = quota_services.quota_request_create(
        actor=reconciled["bob"],
        team=reconciled["vision"],
        pool=pool,
        nominal_gpus=10,
        justification="More.",
    )
    quota_services.quota_request_approve(quota_request=request, approver=reconciled["maria"])
    # The reconcile task applies, then settles the requests waiting for the apply.
    # The three ClusterQueues fail; vision's ResourceQuota follows its new ceiling.
    assert tasks.reconcile_cluster(sim.cluster.pk) == {"applied": 1, "failed": 3}
    request.refresh_from_db()
    assert request.state == "failed"
    assert "queueingStrategy" in request.apply_error
    row = ManagedObject.objects.get(kind="ClusterQueue", name="qm-vision")
    assert row.applied_generation == 1 and row.desired_generation == 2
    assert "422" in row.last_error and "queueingStrategy" in row.last_error
    assert AuditEvent.objects.filter(verb="managed_object.apply_failed").count() == 3
    # The cluster keeps the last good version.
    assert _cq(sim)["spec"]["queueingStrategy"] == "BestEffortFIFO"
    # The same refused manifest is not hammered at the API on every run.
    assert reconcile.cluster_reconcile(cluster_id=sim.cluster.pk) == {"failed-earlier": 3}
    monkeypatch.undo()
    assert tasks.reconcile_cluster(sim.cluster.pk) == {"applied": 3}
    row.refresh_from_db()
    assert row.last_error == "" and row.failed_generation is None
    request.refresh_from_db()
    assert request.state == "applied" and request.apply_error == ""


@pytest.fixture
def flaky_api(monkeypatch):
    """Make kubesim answer 500 to the next N writes (state["fail"] = N)."""
    state = {"fail": 0, "served": 0}
    original = _Handler._handle

    def handle(self, method):
        if method in ("PATCH", "DELETE") and state["fail"] > 0:
            state["fail"] -= 1
            state["served"] += 1
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = {
                "kind": "Status",
                "apiVersion": "v1",
                "status": "Failure",
                "message": "etcdserver: request timed out",
                "reason": "InternalError",
                "code": 500,
            }
            self._send(500, json.dumps(body).encode())
            return None
        return original(self, method)

    monkeypatch.setattr(_Handler, "_handle", handle)
    return state


def test_converges_after_server_errors(world, sim_cluster, settings, flaky_api):
    settings.KUBE_MAX_ATTEMPTS = 1
    make_tiers("production", "experiment")
    Quota.objects.create(team=world["vision"], pool=sim_cluster.pools["a100"], nominal_gpus=8)
    flaky_api["fail"] = 5
    with pytest.raises(kube.TransientError):
        reconcile.cluster_reconcile(cluster_id=sim_cluster.cluster.pk)
    assert flaky_api["served"] == 5
    failing = ManagedObject.objects.exclude(last_error="")
    assert failing.count() == 5
    assert all(r.last_error.startswith("Will retry: 500") for r in failing)
    # The API recovers; the next run (the task's retry, or the beat) finishes the job.
    reconcile.cluster_reconcile(cluster_id=sim_cluster.cluster.pk)
    rows = ManagedObject.objects.filter(cluster=sim_cluster.cluster)
    assert all(r.applied_generation == r.desired_generation for r in rows)
    assert not rows.exclude(last_error="").exists()
    assert _cq(sim_cluster) is not None


def test_removed_team_objects_are_deleted(reconciled):
    sim = reconciled["sim"]
    team = reconciled["recsys"]
    tenancy.team_delete(actor=reconciled["admin"], team=team)
    reconcile.cluster_reconcile(cluster_id=sim.cluster.pk)
    assert not ManagedObject.objects.filter(owner_type="team", owner_id=team.pk).exists()
    assert _cq(sim, "qm-recsys") is None
    assert sim.kube.get("v1", "Namespace", team.namespace) is None
    # Its namespace, the namespace's 5 guard rails, its ClusterQueue and LocalQueue.
    assert AuditEvent.objects.filter(verb="managed_object.delete").count() == 8


def test_team_with_running_jobs_cannot_be_removed(gov_jobs_world):
    world = gov_jobs_world
    with pytest.raises(ValidationError, match="1 job\\(s\\) submitted, queued or running"):
        tenancy.team_delete(actor=world["admin"], team=world["vision"])


@pytest.fixture
def gov_jobs_world(world):
    tiers = make_tiers("production", "experiment")
    Job.objects.create(
        team=world["vision"],
        owner=world["alice"],
        name="train",
        image="pytorch",
        tier=tiers["experiment"],
        max_runtime_seconds=60,
        state="running",
    )
    return world


def test_volcano_cluster_gets_queues_and_priority_classes(world, sim_cluster, settings):
    settings.KUBE_MAX_ATTEMPTS = 1
    sim_cluster.cluster.scheduler = "volcano"
    sim_cluster.cluster.save()
    make_tiers("production", "experiment")
    Quota.objects.create(
        team=world["vision"], pool=sim_cluster.pools["a100"], nominal_gpus=8, borrowing_limit=4
    )
    world["nlp"].queue_hold_reason = "Budget spent"
    world["nlp"].save()
    result = reconcile.cluster_reconcile(cluster_id=sim_cluster.cluster.pk)
    assert set(result) == {"applied"}
    queue = sim_cluster.kube.get("scheduling.volcano.sh/v1beta1", "Queue", "qm-vision")
    assert queue["spec"]["parent"] == "qm-research"
    assert queue["spec"]["capability"] == {"nvidia.com/gpu": "12"}
    held = sim_cluster.kube.get("scheduling.volcano.sh/v1beta1", "Queue", "qm-nlp")
    assert held["spec"]["capability"] == {"nvidia.com/gpu": "0"}
    pc = sim_cluster.kube.get("scheduling.k8s.io/v1", "PriorityClass", "production")
    assert pc["value"] == 1000


def test_kueue_v1beta1_cluster(world, sim_cluster, settings):
    settings.KUBE_MAX_ATTEMPTS = 1
    sim_cluster.cluster.kueue_api_version = "v1beta1"
    sim_cluster.cluster.save()
    make_tiers("production", "experiment")
    Quota.objects.create(team=world["vision"], pool=sim_cluster.pools["a100"], nominal_gpus=8)
    assert set(reconcile.cluster_reconcile(cluster_id=sim_cluster.cluster.pk)) == {"applied"}
    old = sim_cluster.kube.get("kueue.x-k8s.io/v1beta1", "ClusterQueue", "qm-vision")
    assert old["spec"]["cohort"] == "qm-research"
    # Stored once; read through v1beta2 the same object has cohortName.
    assert _cq(sim_cluster)["spec"]["cohortName"] == "qm-research"
    assert reconcile.cluster_check_drift(cluster_id=sim_cluster.cluster.pk)["drifted"] == []


@pytest.mark.django_db(transaction=True)
def test_recording_an_apply_does_not_wait_for_a_sync_holding_the_cluster():
    """A sync (a quota approval's, in a web request) holds the cluster's row while it locks
    the objects; a worker recording an apply meanwhile locks the object's row and must not
    need the cluster's too: the two deadlocked (the approval failed with a 500) on the real
    control plane, where the worker applied while a manager approved."""
    cluster = ClusterFactory()
    row = ManagedObjectFactory(cluster=cluster, desired_generation=1, applied_generation=0)
    held, release = threading.Event(), threading.Event()

    def sync_holding_the_cluster():
        try:
            with transaction.atomic():
                Cluster.objects.select_for_update().get(pk=cluster.pk)
                held.set()
                release.wait(20)
        finally:
            connection.close()

    thread = threading.Thread(target=sync_holding_the_cluster)
    thread.start()
    try:
        assert held.wait(10)
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '2s'")  # waiting on the cluster's row fails
        assert reconcile._record_success(row.pk, 1) == "applied"
    finally:
        release.set()
        thread.join()
        with connection.cursor() as cursor:
            cursor.execute("RESET lock_timeout")
    row.refresh_from_db()
    assert row.applied_generation == 1
