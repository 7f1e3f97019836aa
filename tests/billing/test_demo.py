"""The demo seed: prices, budgets and last month's history, idempotent."""

from billing.demo import seed_billing
from billing.models import Budget, UsageHour
from billing.periods import month_start
from billing.selectors.reports import finance_report
from fleet.demo import seed_fleet
from fleet.models import GpuPrice
from queues.demo import seed_people, seed_quotas


def test_seed_billing_is_idempotent_and_gives_last_month_a_report(db, settings, tmp_path):
    settings.KUBECONFIG = str(tmp_path / "kubeconfig")
    seed_people()
    seed_fleet()
    seed_quotas()
    first = seed_billing()
    assert first["usage_rows"] == 64 * (first["usage_rows"] // 64) > 0
    again = seed_billing()
    assert again["usage_rows"] == 0 and again["prices"] == 0
    assert GpuPrice.objects.count() == 4
    assert Budget.objects.count() == 5
    last = UsageHour.objects.order_by("hour").first().hour
    report = finance_report(month=month_start(last))
    assert len(report["teams"]) == 5
    assert float(report["totals"]["cost"]) > 0
    assert report["idle_capacity"]
