"""Whatever holds a job or a quota request back is on its page and in the API while it holds:
a cluster that refuses an approved quota (every queue object that carries it, on Kueue and on
Volcano), a cluster that keeps failing the apply, a message broker that is down, workers that
stopped."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from core.models import UnsentTask, WorkerHeartbeat
from queues import tasks
from queues.models import Job, ManagedObject, Quota, QuotaRequest
from queues.services import quotas as quota_services
from queues.services.reconcile import cluster_reconcile
from tests.fixtures_cluster import make_sim_cluster
from tests.queues.builders import make_tiers, submit


def _approve(world, pool, gpus):
    request = quota_services.quota_request_create(
        actor=world["bob"], team=world["vision"], pool=pool, nominal_gpus=gpus,
        justification="The detector.",
    )  # fmt: skip
    quota_services.quota_request_approve(quota_request=request, approver=world["maria"])
    return request


def _shown(client, api, request) -> tuple[str, dict]:
    page = client.get(reverse("quota-request-detail", args=[request.pk])).content.decode()
    answer = api.get(f"/api/v1/quota-requests/{request.pk}/")
    assert answer.status_code == 200
    return page, answer.json()


@pytest.mark.parametrize("scheduler", ["kueue", "volcano"])
def test_a_quota_the_cluster_refuses_shows_the_refusal_on_the_page_and_in_the_api(
    world, client, api_as, scheduler
):
    make_tiers()
    with make_sim_cluster(scheduler=scheduler) as sim:
        sim.sync()
        Quota.objects.create(team=world["vision"], pool=sim.pools["l4"], nominal_gpus=2)
        cluster_reconcile(cluster_id=sim.cluster.pk)
        # The object that carries the a100 quota: Kueue's ClusterQueue, Volcano's pool queue.
        path = "/clusterqueues/qm-vision" if scheduler == "kueue" else "/queues/qm-vision-a100"
        sim.sim.inject_faults(
            10, methods=("PATCH",), code=422, path=path,
            message="admission webhook denied the request: capability below guarantee",
        )  # fmt: skip
        request = _approve(world, sim.pools["a100"], 6)
        tasks.reconcile_cluster(sim.cluster.pk)
        request.refresh_from_db()
        assert request.state == QuotaRequest.State.FAILED
        assert "capability below guarantee" in request.apply_error
        client.force_login(world["bob"])
        page, body = _shown(client, api_as(world["bob"]), request)
        assert "The cluster refused the change" in page and "capability below guarantee" in page
        assert body["state"] == "failed" and "capability below guarantee" in body["apply_error"]


def test_a_quota_the_cluster_keeps_failing_says_so_while_it_is_retried(
    world, client, api_as, settings
):
    settings.KUBE_MAX_ATTEMPTS = 1
    make_tiers()
    with make_sim_cluster() as sim:
        sim.sync()
        cluster_reconcile(cluster_id=sim.cluster.pk)
        sim.sim.inject_faults(100, methods=("PATCH",), code=500, path="/clusterqueues/qm-vision")
        request = _approve(world, sim.pools["a100"], 6)
        tasks.reconcile_cluster.apply(args=[sim.cluster.pk])  # retried eagerly, then given up
        request.refresh_from_db()
        assert request.state == QuotaRequest.State.APPROVED
        client.force_login(world["bob"])
        page, body = _shown(client, api_as(world["bob"]), request)
        for shown in (page, body["apply_wait"]):
            assert "did not take the new quota yet" in shown
            assert "etcdserver: request timed out" in shown


def test_an_approval_whose_message_the_broker_did_not_take_says_so(world, client, api_as):
    make_tiers()
    with make_sim_cluster() as sim:
        sim.sync()
        cluster_reconcile(cluster_id=sim.cluster.pk)
        request = _approve(world, sim.pools["a100"], 6)
        ManagedObject.objects.filter(kind="ClusterQueue").update(last_error="", attempts=0)
        kept = UnsentTask.objects.create(name="queues.reconcile_cluster", args=[sim.cluster.pk])
        UnsentTask.objects.filter(pk=kept.pk).update(
            created_at=timezone.now() - timedelta(minutes=3)
        )
        client.force_login(world["bob"])
        page, body = _shown(client, api_as(world["bob"]), request)
        for shown in (page, body["apply_wait"]):
            assert "the message broker has not been answering since" in shown
            assert "is kept and sent as soon as it answers" in shown


def test_a_submitted_job_says_when_the_broker_or_the_workers_hold_it_back(jw, client, api_as):
    job = submit(jw, name="waits", gpus_per_worker=1)
    Job.objects.filter(pk=job.pk).update(cluster=jw["cluster"])
    UnsentTask.objects.create(name="queues.apply_jobs", args=[jw["cluster"].pk])
    client.force_login(jw["alice"])
    api = api_as(jw["alice"])
    for shown in (
        client.get(reverse("job-detail", args=[job.pk])).content.decode(),
        api.get(f"/api/v1/jobs/{job.pk}/").json()["pending_reason"],
        api.get("/api/v1/jobs/").json()["results"][0]["pending_reason"],
    ):
        assert "the message broker has not been answering since" in shown
    UnsentTask.objects.all().delete()
    WorkerHeartbeat.objects.create(hostname="w1", seen_at=timezone.now() - timedelta(minutes=9))
    for shown in (
        client.get(reverse("job-detail", args=[job.pk])).content.decode(),
        api.get(f"/api/v1/jobs/{job.pk}/").json()["pending_reason"],
    ):
        assert "Waiting for a worker: none has reported since" in shown
