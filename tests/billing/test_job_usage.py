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


def test_a_job_shorter_than_an_hour_is_charted_by_the_five_minutes(world, prod, client):
    """Its samples all fall in one hour: by the hour its chart was one point, no line."""
    from billing import dcgm
    from billing.models import UsageHour
    from billing.services.usage import usage_scrape_record

    job = make_job(world["vision"], world["alice"], name="short", pod="short-0")
    sid = dcgm.SeriesId(
        gpu_uuid="GPU-s", node="a100-0", model_name="NVIDIA A100", mig_profile="",
        namespace=world["vision"].namespace, pod="short-0",
    )  # fmt: skip
    # 20 minutes from 10:02, a scrape every 30 s: 80 % until 10:12, then 20 %.
    for k in range(40):
        at = H + timedelta(minutes=2, seconds=30 * (k + 1))
        sample = dcgm.GpuSample(sid=sid, util=80.0 if k < 20 else 20.0, fb_used=1000.0)
        usage_scrape_record(cluster=prod["cluster"], url="http://exporter", samples=[sample],
                            scraped_at=at)  # fmt: skip
    row = UsageHour.objects.get(job=job)
    assert sorted(row.util_buckets, key=int) == ["0", "5", "10", "15", "20"]
    assert row.util_buckets["5"] == [10 * 80.0, 10]  # 10:05:00 < t <= 10:10:00
    client.force_login(world["alice"])
    api = client.get(reverse("billing-api-job-usage", args=[job.pk])).json()["utilisation"]
    assert api["step_minutes"] == 5
    # 10:10-10:15 holds four samples at 80 % and six at 20 %.
    assert [p["util_percent"] for p in api["points"]] == [80.0, 80.0, 44.0, 20.0, 20.0]
    panel = client.get(reverse("billing-job-usage", args=[job.pk])).content.decode()
    points = panel.split('points="')[1].split('"')[0].split()
    assert len(points) == 5 and "GPU utilisation per 5 minutes" in panel


def test_one_hour_of_use_draws_a_level_line_not_nothing(world, prod, client):
    job = make_job(world["vision"], world["alice"], name="hourly")
    _hours(prod, job, [40.0])  # as Prometheus ingests it: no minutes kept
    client.force_login(world["alice"])
    panel = client.get(reverse("billing-job-usage", args=[job.pk])).content.decode()
    assert 'points="0.0,36.0 300.0,36.0"' in panel and "GPU utilisation per hour" in panel
