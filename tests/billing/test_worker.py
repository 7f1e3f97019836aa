"""The budget journey across a real Celery worker: beat's budget check holds the queue."""

from datetime import timedelta
from decimal import Decimal

from django.utils import timezone

from billing.models import Budget, UsageHour
from billing.periods import month_start
from billing.tasks import check_budgets
from queues import manifests
from queues.models import Quota
from queues.services import reconcile
from tests.billing.conftest import make_price
from tests.conftest import wait_until
from tests.queues.gov_fixtures import make_tiers


def test_spent_budget_holds_the_local_queue_through_the_worker(
    world, sim_cluster_synced, celery_worker_process
):
    sc = sim_cluster_synced
    vision = world["vision"]
    make_tiers()
    Quota.objects.create(team=vision, pool=sc.pools["l4"], nominal_gpus=4)
    reconcile.cluster_reconcile(cluster_id=sc.cluster.pk)
    make_price(sc.gpu_models["L4"], "1.0000")
    month = month_start(timezone.now())
    Budget.objects.create(team=vision, month=month, amount=Decimal("2.00"), enforce=True,
                          thresholds=[50, 80, 100])  # fmt: skip
    start = timezone.now().replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    for i in range(3):
        UsageHour.objects.create(
            hour=start + timedelta(hours=i), cluster=sc.cluster, gpu_uuid="GPU-1", pod="p",
            namespace=vision.namespace, team=vision, gpu_model=sc.gpu_models["L4"],
            seconds_allocated=3600,
        )  # fmt: skip
    check_budgets.delay()  # what beat runs every five minutes

    def held():
        lq = sc.kube.get(
            "kueue.x-k8s.io/v1beta2", "LocalQueue", manifests.local_queue_name(vision),
            vision.namespace,
        )  # fmt: skip
        return lq is not None and lq["spec"].get("stopPolicy") == "Hold"

    assert wait_until(held, timeout=60)
    budget = Budget.objects.get(team=vision, month=month)
    assert budget.held and budget.last_spent == Decimal("3.00")
