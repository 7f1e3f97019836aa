"""The budget journey across a real Celery worker: beat's budget check holds the queue."""

from decimal import Decimal

from django.utils import timezone

from billing.models import Budget
from billing.periods import month_start
from billing.tasks import check_budgets
from queues.manifests import quotas as manifests
from tests.conftest import wait_until
from tests.factories import BudgetFactory


def test_spent_budget_holds_the_local_queue_through_the_worker(spending, celery_worker_process):
    sc, vision = spending["sc"], spending["vision"]
    month = month_start(timezone.now())
    BudgetFactory(team=vision, month=month, amount=Decimal("2.00"), enforce=True)
    check_budgets.delay()  # what beat runs every five minutes

    def held():
        lq = sc.kube.get(
            "kueue.x-k8s.io/v1beta2", "LocalQueue", manifests.local_queue_name(vision),
            vision.namespace,
        )  # fmt: skip
        return lq is not None and lq["spec"].get("stopPolicy") == "Hold"

    assert wait_until(held, timeout=60)
    budget = Budget.objects.get(team=vision, month=month)
    assert budget.held and budget.last_spent == Decimal("12.00")  # 10 L4 GPU-hours at 1.20
