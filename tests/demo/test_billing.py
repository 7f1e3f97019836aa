"""The demo's billing seed: a price book for every unit the demo fleet has (whole GPUs, a MIG
profile, time-slices, spot), idempotent; the usage and budgets made from its history are tested
on the running demo (test_running_demo)."""

from billing.models import Budget
from demo.billing import seed_billing
from demo.fleet import seed_fleet
from demo.queues import seed_people, seed_quotas
from fleet.models import GpuPrice


def test_seed_billing_is_idempotent_and_prices_every_unit(db, settings, tmp_path):
    settings.KUBECONFIG = str(tmp_path / "kubeconfig")
    seed_people()
    seed_fleet()
    seed_quotas()
    first = seed_billing()
    # Without a history there is no usage; budgets are still made, at a floor.
    assert (first["prices"], first["budgets"], first["usage_rows"]) == (8, 5, 0)
    again = seed_billing()
    assert (again["prices"], again["budgets"], again["usage_rows"]) == (0, 0, 0)
    assert set(GpuPrice.objects.values_list("gpu_model__name", "mig_profile")) == {
        ("A100-SXM4-80GB", ""), ("A100-SXM4-80GB", "1g.10gb"), ("H100-80GB-HBM3", ""),
        ("L4", ""), ("L4", "time-slice 1/4"), ("L4", "spot"), ("L40S", ""),
    }  # fmt: skip
    # A100 got cheaper in the middle of last month: two prices, one after the other.
    a100 = list(GpuPrice.objects.filter(gpu_model__name="A100-SXM4-80GB", mig_profile="")
                .order_by("effective_from"))  # fmt: skip
    assert a100[0].effective_to == a100[1].effective_from and a100[1].effective_to is None
    assert Budget.objects.filter(enforce=True).count() == 1
