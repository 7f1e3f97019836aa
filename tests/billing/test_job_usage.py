"""One job's measured use on its page and in the API, from the hours billing ingested."""

from datetime import UTC, datetime, timedelta

from django.urls import reverse

from tests.billing.conftest import make_job, make_price
from tests.factories import UsageHourFactory

H = datetime(2026, 10, 5, 10, tzinfo=UTC)


def _hours(prod, job, utils):
    for i, util in enumerate(utils):
        for uuid in ("GPU-a", "GPU-b"):
            UsageHourFactory(
                cluster=prod["cluster"], hour=H + timedelta(hours=i), gpu_uuid=uuid, pod="w-0",
                team=job.team, job=job, gpu_model=prod["a100"], seconds_busy=round(36 * util),
                util_mean=util, memory_used_mib_mean=20000 + i, memory_used_mib_max=30000 + i,
            )  # fmt: skip


def test_the_api_gives_a_jobs_use_cost_and_price(world, prod, api_as):
    make_price(prod["a100"], "2.0000")
    job = make_job(world["vision"], world["alice"], name="measured")
    _hours(prod, job, [80.0, 60.0])
    body = api_as(world["alice"]).get(reverse("billing-api-job-usage", args=[job.pk])).json()
    assert body["gpus_seen"] == 2 and body["gpu_hours_held"] == "4.0000"
    assert body["util_percent"] == 70.0 and body["cost"] == "8.00"  # 4 GPU-hours × 2.00
    assert body["prices"] == [{"gpu_model": "A100", "price_per_hour": "2.0000", "currency": "EUR"}]
    assert [p["util_percent"] for p in body["timeline"]] == [80.0, 60.0]
    assert body["timeline"][1]["memory_mib_max"] == 30001
    assert body["low_utilisation"] is False
    # Another team's job is not there for alice.
    other = make_job(world["nlp"], world["carol"], name="theirs")
    assert (
        api_as(world["alice"]).get(reverse("billing-api-job-usage", args=[other.pk])).status_code
        == 404
    )


def test_a_job_holding_gpus_it_barely_uses_says_so_on_its_page(world, prod, client):
    make_price(prod["a100"], "2.0000")
    job = make_job(world["vision"], world["alice"], name="idle")
    _hours(prod, job, [1.0, 2.0])
    client.force_login(world["alice"])
    page = client.get(reverse("job-detail", args=[job.pk])).content.decode()
    assert reverse("billing-job-usage", args=[job.pk]) in page
    panel = client.get(reverse("billing-job-usage", args=[job.pk])).content.decode()
    assert 'data-testid="low-util"' in panel and "1.5 % mean utilisation" in panel
    assert 'data-testid="util-chart"' in panel and "8.00 EUR" in panel
