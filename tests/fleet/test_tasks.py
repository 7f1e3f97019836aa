"""The inventory sync task: enqueued by 'Sync now', run by a real Celery worker."""

from django.urls import reverse

from fleet.models import Cluster, Node
from fleet.tasks import sync_inventory
from tests.conftest import wait_until


def test_sync_now_runs_in_a_real_worker(client, world, sim_cluster, celery_worker_process):
    client.force_login(world["admin"])
    response = client.post(reverse("fleet-cluster-sync", args=[sim_cluster.cluster.pk]))
    assert response.status_code == 302

    assert wait_until(lambda: Node.objects.count() == 5, timeout=60), "worker did not sync"
    cluster = Cluster.objects.get(pk=sim_cluster.cluster.pk)
    assert cluster.last_sync_at is not None and cluster.last_sync_error == ""
    assert Node.objects.filter(pool=sim_cluster.pools["a100"]).count() == 2


def test_task_without_id_fans_out_to_every_cluster(sim_cluster, monkeypatch):
    from tests.queues.builders import run_tasks_eagerly

    run_tasks_eagerly(monkeypatch)
    sync_inventory.delay()
    assert Node.objects.filter(cluster=sim_cluster.cluster).count() == 5


def test_task_for_a_missing_cluster_does_nothing(db):
    sync_inventory.run(cluster_id=987654)
    assert not Node.objects.exists()
