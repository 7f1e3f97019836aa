"""Energy and carbon in Chromium (issue #35): finance reads kWh and CO2e in the month's report;
a researcher reads their job's energy beside its cost."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from billing.models import EnergySettings, UsageHour
from billing.periods import month_start
from fleet.models import Cluster, GpuModel
from tests.billing.conftest import make_job, make_price
from tests.factories import PASSWORD

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def measured_job(world):
    """alice's job: 2 GPUs × 3 h at 300 W last month (1.8 kWh), and one GPU-hour that the
    exporter gave no energy reading for; PUE 1.2, 400 gCO2e/kWh."""
    cluster = Cluster.objects.create(name="prod", kubeconfig_path="/dev/null", is_default=True)
    a100 = GpuModel.objects.create(name="A100", dcgm_model_names=["NVIDIA A100"])
    make_price(a100, "2.0000")
    EnergySettings.objects.create(pk=1, pue=Decimal("1.20"), grams_per_kwh=Decimal("400"))
    last = month_start(month_start(timezone.now()) - timedelta(days=1))
    start = datetime(last.year, last.month, 1, tzinfo=UTC)
    job = make_job(world["vision"], world["alice"], name="measured-train", pod="measured-0")
    cells = [(h, uuid, 300 * 3600) for h in range(3) for uuid in ("GPU-a", "GPU-b")]
    for h, uuid, joules in [*cells, (3, "GPU-a", None)]:
        UsageHour.objects.create(
            hour=start + timedelta(hours=h), cluster=cluster, gpu_uuid=uuid, pod="measured-0",
            namespace=job.team.namespace, team=job.team, job=job, gpu_model=a100,
            model_name="NVIDIA A100", seconds_allocated=3600, seconds_busy=2000, util_mean=55.0,
            sample_count=120, expected_samples=120, energy_joules=joules,
        )  # fmt: skip
    return {"job": job, "month": last}


def test_finance_sees_kwh_and_co2e_in_the_months_report(page, login, measured_job):
    login("frank", PASSWORD)
    page.goto(f"/billing/reports/{measured_job['month']:%Y-%m}/")
    total = page.get_by_test_id("energy-total")
    assert total.locator(".energy-kwh").inner_text() == "1.800 kWh"
    assert total.locator(".energy-facility").inner_text() == "2.160 kWh"
    assert total.locator(".energy-co2e").inner_text() == "0.864 kg CO2e"
    assert "1.00 GPU-h not measured" in total.inner_text()
    vision = page.locator('#teams-table tr[data-team="vision"]').get_by_test_id("energy-vision")
    assert vision.locator(".energy-co2e").inner_text() == "0.864 kg CO2e"
    assert "estimates" in page.get_by_test_id("energy-note").inner_text()


def test_a_researcher_sees_their_jobs_energy_beside_its_cost(page, login, measured_job):
    login("alice", PASSWORD)
    page.goto(reverse("job-detail", args=[measured_job["job"].pk]))
    energy = page.get_by_test_id("energy-job")
    energy.wait_for()
    assert energy.locator(".energy-kwh").inner_text() == "1.800 kWh"
    assert energy.locator(".energy-co2e").inner_text() == "0.864 kg CO2e"
    assert "1.00 GPU-h not measured" in energy.inner_text()
    facts = page.get_by_test_id("usage-facts").inner_text()
    assert "Cost so far" in facts and "14.00 EUR" in facts  # 7 GPU-hours × 2.00
