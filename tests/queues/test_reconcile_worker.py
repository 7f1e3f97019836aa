"""A real Celery worker: approval → worker applies the ClusterQueue → request applied."""

from django.urls import reverse

from queues import tasks
from queues.models import ManagedObject, Quota, QuotaRequest
from queues.services import quotas as quota_services
from tests.conftest import wait_until
from tests.queues.builders import make_tiers

CQ_API = "kueue.x-k8s.io/v1beta2"


def _nominal(sim, name="qm-vision"):
    cq = sim.kube.get(CQ_API, "ClusterQueue", name)
    if cq is None or not cq["spec"].get("resourceGroups"):
        return None
    return int(cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][-1]["nominalQuota"])


def test_approval_is_applied_by_a_worker(world, sim_cluster_synced, celery_worker_process, api_as):
    sim = sim_cluster_synced
    make_tiers("production", "experiment")
    Quota.objects.create(team=world["vision"], pool=sim.pools["a100"], nominal_gpus=4)
    request = quota_services.quota_request_create(
        actor=world["bob"],
        team=world["vision"],
        pool=sim.pools["a100"],
        nominal_gpus=12,
        justification="Detector training.",
    )
    response = api_as(world["maria"]).post(
        reverse("quotarequest-approve", args=[request.pk]), {}, format="json"
    )
    assert response.status_code == 200, response.content

    def applied():
        return QuotaRequest.objects.get(pk=request.pk).state == QuotaRequest.State.APPLIED

    assert wait_until(applied, timeout=60), QuotaRequest.objects.get(pk=request.pk).__dict__
    assert _nominal(sim) == 12
    row = ManagedObject.objects.get(kind="ClusterQueue", name="qm-vision")
    assert row.applied_generation == row.desired_generation


def test_a_lost_message_is_recovered_by_the_beat(
    world, sim_cluster_synced, celery_worker_process, monkeypatch
):
    sim = sim_cluster_synced
    make_tiers("production", "experiment")
    Quota.objects.create(team=world["vision"], pool=sim.pools["a100"], nominal_gpus=4)
    request = quota_services.quota_request_create(
        actor=world["bob"],
        team=world["vision"],
        pool=sim.pools["a100"],
        nominal_gpus=6,
        justification="More.",
    )
    # The enqueue after commit is lost (Redis restarted, or the worker died holding it).
    with monkeypatch.context() as m:
        m.setattr(tasks.reconcile_cluster, "delay", lambda *a, **k: None)
        quota_services.quota_request_approve(quota_request=request, approver=world["maria"])
    request.refresh_from_db()
    assert request.state == QuotaRequest.State.APPROVED
    assert _nominal(sim) is None  # nothing applied yet
    tasks.reconcile_all()  # what beat runs every minute

    def applied():
        return QuotaRequest.objects.get(pk=request.pk).state == QuotaRequest.State.APPLIED

    assert wait_until(applied, timeout=60)
    assert _nominal(sim) == 6


def test_worker_killed_mid_apply_loses_and_duplicates_nothing(
    world, sim_cluster_synced, celery_worker_process, monkeypatch
):
    import io
    import threading
    import time

    from kubesim.server import _Handler
    from queues.services import reconcile

    sim = sim_cluster_synced
    make_tiers("production", "experiment")
    Quota.objects.create(team=world["vision"], pool=sim.pools["a100"], nominal_gpus=4)
    reconcile.cluster_reconcile(cluster_id=sim.cluster.pk)
    entered = threading.Event()
    original = _Handler._handle

    def slow(self, method):
        if method == "PATCH" and "/clusterqueues/qm-vision" in self.path:
            # Take the whole request, then stall: the worker dies waiting for the answer,
            # while the API server still carries the apply out.
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.rfile = io.BytesIO(body)
            entered.set()
            time.sleep(2)
        return original(self, method)

    monkeypatch.setattr(_Handler, "_handle", slow)
    request = quota_services.quota_request_create(
        actor=world["bob"],
        team=world["vision"],
        pool=sim.pools["a100"],
        nominal_gpus=10,
        justification="More.",
    )
    quota_services.quota_request_approve(quota_request=request, approver=world["maria"])
    assert entered.wait(60), "the worker never started the apply"
    celery_worker_process.kill()
    celery_worker_process.wait(timeout=10)
    time.sleep(2.5)  # the API server finishes the request the dead worker sent

    row = ManagedObject.objects.get(kind="ClusterQueue", name="qm-vision")
    assert row.applied_generation < row.desired_generation  # not recorded, but not lost
    assert row.pk in reconcile.managed_objects_lagging(older_than_seconds=0)
    assert _nominal(sim) == 10  # the apply reached the cluster before the worker died
    generation = sim.kube.get(CQ_API, "ClusterQueue", "qm-vision")["metadata"]["generation"]

    # The next worker (here: the beat's reconcile, run in-process) finishes the job.
    tasks.reconcile_cluster(sim.cluster.pk)
    request.refresh_from_db()
    assert request.state == QuotaRequest.State.APPLIED
    assert _nominal(sim) == 10
    # Applying the same manifest again changed nothing in the cluster.
    assert sim.kube.get(CQ_API, "ClusterQueue", "qm-vision")["metadata"]["generation"] == generation
