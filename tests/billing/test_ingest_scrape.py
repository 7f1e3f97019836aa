"""Direct scrape of kubesim's DCGM endpoint into UsageHour rows (the embedded default)."""

import http.server
import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from billing import dcgm
from billing.models import ScrapeState, UsageDayState, UsageHour
from billing.selectors.reports import usage_summary
from billing.services.usage import (
    usage_pod_lifetimes_apply,
    usage_reattribute,
    usage_scrape_record,
)
from billing.tasks import scrape_dcgm
from queues.models import JobPod
from tests.billing.conftest import make_job, run_pod
from tests.queues.builders import make_cluster

H10 = datetime(2026, 10, 5, 10, 0, tzinfo=UTC)


def _record(cluster, url, samples, times):
    for t in times:
        usage_scrape_record(cluster=cluster, url=url, samples=samples, scraped_at=t)


def test_scrape_known_workload_exact_hours_and_cost(l4_priced, world):
    sc = l4_priced
    vision = world["vision"]
    job = make_job(vision, world["alice"], pod="train-0")
    uuids = run_pod(
        sc.api_client, namespace=vision.namespace, name="train-0", gpus=2, accelerator="nvidia-l4"
    )
    url = f"{sc.sim.url}/metrics/dcgm"
    samples = dcgm.scrape(url)
    held = [s for s in samples if s.sid.pod == "train-0"]
    assert sorted(s.sid.gpu_uuid for s in held) == sorted(uuids)
    # 121 scrapes, 30 s apart, from 10:00:00 to 11:00:00: hour 10 is covered exactly once.
    _record(sc.cluster, url, samples, [H10 + timedelta(seconds=30 * k) for k in range(121)])

    rows = UsageHour.objects.filter(hour=H10, pod="train-0")
    assert rows.count() == 2
    # Which GPUs the pod held is known from the DCGM series (the API does not say).
    assert job.pods.get().gpu_uuids == sorted(uuids)
    for row in rows:
        assert row.seconds_allocated == 3600
        assert row.team == vision and row.job == job
        assert row.pool == sc.pools["l4"]
        assert row.sample_count == 120 and not row.flag_gap and not row.flag_unknown_model
        sample = next(s for s in held if s.sid.gpu_uuid == row.gpu_uuid)
        assert row.seconds_busy == round(3600 * sample.gr_active)
        assert row.util_mean == pytest.approx(sample.util)
    # Every other GPU of the fleet is idle capacity for the full hour.
    idle = UsageHour.objects.filter(hour=H10, pod="")
    assert idle.count() == 8 + 16 + 4 - 2
    assert set(idle.values_list("seconds_idle", flat=True)) == {3600}
    # The spare T4 node has no GpuModel and no price: kept and flagged.
    t4 = idle.filter(model_name="Tesla T4")
    assert t4.count() == 4 and all(r.flag_unknown_model for r in t4)

    summary = usage_summary(team=vision, start=H10, end=H10 + timedelta(hours=1))
    assert summary["totals"]["gpu_hours_allocated"] == "2.0000"
    assert summary["totals"]["cost"] == "2.40"  # 2 GPU-hours × 1.20
    assert summary["models"][0]["gpu_model"] == "L4"


def test_scrape_is_idempotent_per_timestamp(l4_priced, world):
    sc = l4_priced
    run_pod(sc.api_client, namespace=world["nlp"].namespace, name="p", gpus=1,
            accelerator="nvidia-l4")  # fmt: skip
    url = f"{sc.sim.url}/metrics/dcgm"
    samples = dcgm.scrape(url)
    times = [H10 + timedelta(seconds=30 * k) for k in range(1, 11)]
    _record(sc.cluster, url, samples, times)
    before = list(UsageHour.objects.order_by("pk").values("seconds_allocated", "seconds_idle"))
    _record(sc.cluster, url, samples, times)  # the same scrapes again, e.g. a retried task
    after = list(UsageHour.objects.order_by("pk").values("seconds_allocated", "seconds_idle"))
    assert before == after
    row = UsageHour.objects.get(pod="p")
    assert row.seconds_allocated == 300 and row.team == world["nlp"]  # namespace fallback
    assert row.job is None


def test_scrape_gap_is_flagged_not_billed(l4_priced, world):
    sc = l4_priced
    run_pod(sc.api_client, namespace=world["vision"].namespace, name="g", gpus=1,
            accelerator="nvidia-l4")  # fmt: skip
    url = f"{sc.sim.url}/metrics/dcgm"
    samples = dcgm.scrape(url)
    times = [H10 + timedelta(seconds=30 * k) for k in range(1, 5)]
    times += [H10 + timedelta(seconds=30 * k) for k in range(40, 44)]  # 17.5 minutes missing
    _record(sc.cluster, url, samples, times)
    row = UsageHour.objects.get(pod="g")
    assert row.flag_gap
    assert row.seconds_allocated == 8 * 30  # the missing span is not billed
    assert row.expected_samples > row.sample_count


def test_stuck_zero_is_flagged(l4_priced, world, settings):
    settings.BILLING_STUCK_ZERO_SECONDS = 120
    sc = l4_priced
    run_pod(sc.api_client, namespace=world["vision"].namespace, name="z", gpus=1,
            accelerator="nvidia-l4", util=0)  # fmt: skip
    url = f"{sc.sim.url}/metrics/dcgm"
    samples = dcgm.scrape(url)
    # kubesim's jitter lifts even a 0 % profile above zero now and then; pin it at zero.
    for sample in samples:
        if sample.sid.pod == "z":
            sample.util = sample.gr_active = 0.0
    _record(sc.cluster, url, samples, [H10 + timedelta(seconds=30 * k) for k in range(1, 11)])
    row = UsageHour.objects.get(pod="z")
    assert row.flag_stuck_zero and row.seconds_allocated == 300 and row.seconds_busy == 0


@pytest.fixture
def bad_exporter():
    """A real HTTP endpoint that serves malformed exporter text."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b'DCGM_FI_DEV_GPU_UTIL{UUID="x" 1\n'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/metrics"
    server.shutdown()
    server.server_close()


def test_scrape_failure_is_recorded_and_nothing_lost(l4_priced, settings, bad_exporter):

    sc = l4_priced
    with pytest.raises(dcgm.MetricsError):
        dcgm.scrape(bad_exporter)
    UsageHour.objects.create(hour=H10, cluster=sc.cluster, gpu_uuid="GPU-1", seconds_idle=60)
    settings.DCGM_SCRAPE_URLS = [bad_exporter, "http://127.0.0.1:9/unreachable"]
    settings.PROMETHEUS_URL = ""
    assert scrape_dcgm() == 0
    assert "malformed" in ScrapeState.objects.get(url=bad_exporter).last_error
    assert "failed" in ScrapeState.objects.get(url="http://127.0.0.1:9/unreachable").last_error
    assert UsageHour.objects.get(gpu_uuid="GPU-1").seconds_idle == 60


def test_pod_lifetimes_make_allocation_exact(l4_priced, world):
    """Samples every 30 s place the pod's start and end within 30 s; its timestamps fix that."""

    sc = l4_priced
    vision = world["vision"]
    job = make_job(vision, world["alice"], pod="short-0")
    run_pod(sc.api_client, namespace=vision.namespace, name="short-0", gpus=1,
            accelerator="nvidia-l4")  # fmt: skip
    url = f"{sc.sim.url}/metrics/dcgm"
    held = [s for s in dcgm.scrape(url) if s.sid.pod == "short-0"]
    idle = [replace(s, sid=replace(s.sid, pod="", namespace="")) for s in held]
    started, finished = H10 + timedelta(seconds=65), H10 + timedelta(seconds=65 + 611)
    JobPod.objects.filter(job=job).update(started_at=started, finished_at=finished)
    for k in range(1, 60):
        t = H10 + timedelta(seconds=30 * k)
        samples = held if started <= t < finished else idle
        usage_scrape_record(cluster=sc.cluster, url=url, samples=samples, scraped_at=t)
    row = UsageHour.objects.get(pod="short-0")
    assert row.seconds_allocated == 600  # 20 ticks × 30 s: 11 s short of the truth
    assert usage_pod_lifetimes_apply(since=H10) == 1
    row.refresh_from_db()
    idle_row = UsageHour.objects.get(gpu_uuid=row.gpu_uuid, pod="")
    assert row.seconds_allocated == 611 and row.exact_times
    assert row.seconds_allocated + idle_row.seconds_idle == 59 * 30
    assert usage_pod_lifetimes_apply(since=H10) == 0  # idempotent


def test_usage_api_includes_the_hour_in_progress(l4_priced, world, api_as):
    """A job that just ended shows up at once: the scrape keeps the current hour's rows."""

    sc = l4_priced
    vision = world["vision"]
    make_job(vision, world["alice"], pod="now-0")
    run_pod(sc.api_client, namespace=vision.namespace, name="now-0", gpus=1,
            accelerator="nvidia-l4")  # fmt: skip
    url = f"{sc.sim.url}/metrics/dcgm"
    now = timezone.now()
    samples = dcgm.scrape(url)
    _record(sc.cluster, url, samples, [now - timedelta(seconds=60), now - timedelta(seconds=30)])
    # The previous hour is included too, in case the two scrapes straddle an hour boundary.
    start = dcgm.hour_start(now) - timedelta(hours=1)
    r = api_as(world["bob"]).get(
        reverse("billing-api-usage"),
        {
            "team": "vision",
            "start": start.isoformat(),
            "end": (now + timedelta(hours=1)).isoformat(),
        },
    )
    assert r.status_code == 200, r.content
    # 30 s credited for the first scrape's interval, 30 s for the span up to the second.
    assert r.json()["totals"]["gpu_hours_allocated"] == "0.0167"


def test_a_series_that_vanishes_is_a_gap(l4_priced, world):
    sc = l4_priced
    url = f"{sc.sim.url}/metrics/dcgm"
    samples = dcgm.scrape(url)
    gone = samples[0].sid.gpu_uuid
    times = [H10 + timedelta(seconds=30 * k) for k in range(1, 6)]
    _record(sc.cluster, url, samples, times[:3])
    rest = [s for s in samples if s.sid.gpu_uuid != gone]
    _record(sc.cluster, url, rest, times[3:])
    assert UsageHour.objects.get(gpu_uuid=gone).flag_gap
    assert not UsageHour.objects.filter(flag_gap=True).exclude(gpu_uuid=gone).exists()


def test_finance_sees_ingestion_problems(l4_priced, world, settings, bad_exporter, client):

    settings.DCGM_SCRAPE_URLS = [bad_exporter]
    settings.PROMETHEUS_URL = ""
    scrape_dcgm()
    client.force_login(world["frank"])
    html = client.get(reverse("billing-report", args=["2026-10"])).content.decode()
    assert "Metrics ingestion needs attention" in html and bad_exporter in html
    client.force_login(world["alice"])
    html = client.get(reverse("billing-report", args=["2026-10"])).content.decode()
    assert "Metrics ingestion needs attention" not in html


def test_reattribute_attaches_rows_seen_before_their_jobpod(world, django_assert_num_queries):
    """Rows credited before the JobPod was recorded get its job and team in a fixed few queries."""
    cluster = make_cluster()
    vision = world["vision"]
    next_day = H10 + timedelta(days=1)
    for hour, pod in [(H10, "late-0"), (next_day, "late-0"), (H10, "late-1"), (H10, "other")]:
        UsageHour.objects.create(
            hour=hour, cluster=cluster, gpu_uuid=f"GPU-{pod}", pod=pod,
            namespace=vision.namespace, seconds_allocated=3600,
        )  # fmt: skip
    first = make_job(vision, world["alice"], name="a", pod="late-0")
    second = make_job(vision, world["alice"], name="b", pod="late-1")
    UsageDayState.objects.create(cluster=cluster, day=H10.date(), dirty=False)

    # The rows, the JobPods, one upsert of the dirty days, per pod: its GPUs and its rows.
    with django_assert_num_queries(7):
        assert usage_reattribute(since=H10) == 3
    assert first.pods.get().gpu_uuids == ["GPU-late-0"]
    assert second.pods.get().gpu_uuids == ["GPU-late-1"]

    rows = {(r.pod, r.hour): (r.job_id, r.team_id) for r in UsageHour.objects.all()}
    assert rows[("late-0", H10)] == rows[("late-0", next_day)] == (first.pk, vision.pk)
    assert rows[("late-1", H10)] == (second.pk, vision.pk)
    assert rows[("other", H10)] == (None, None)
    dirty = set(UsageDayState.objects.filter(dirty=True).values_list("day", flat=True))
    assert dirty == {H10.date(), next_day.date()}
    assert usage_reattribute(since=H10) == 0  # nothing left to attach


def test_the_scrape_reads_kubesims_energy_counter(l4_priced, world):
    """kubesim's exporter declares the energy field a counter; the parser names its samples
    with a _total suffix, which must still be read as the DCGM energy field."""
    sc = l4_priced
    url = f"{sc.sim.url}/metrics/dcgm"
    first = dcgm.scrape(url)
    assert first and all(s.energy_mj and s.energy_mj > 0 for s in first)
    text = "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n" + (
        'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0",UUID="GPU-1",Hostname="n",'
        'modelName="NVIDIA L4"} 123456\n'
    )
    (parsed,) = dcgm.parse_exposition(text)
    assert parsed.energy_mj == 123456.0
    later = [replace(s, energy_mj=s.energy_mj + 5_000_000) for s in first]
    # The first scrape is credited the interval before it: both fall inside hour 10.
    at = H10 + timedelta(seconds=30)
    usage_scrape_record(cluster=sc.cluster, url=url, samples=first, scraped_at=at)
    usage_scrape_record(
        cluster=sc.cluster, url=url, samples=later, scraped_at=at + timedelta(seconds=30)
    )
    rows = UsageHour.objects.filter(hour=H10)
    assert rows.exists() and all(r.energy_joules == pytest.approx(5000.0) for r in rows)


def test_an_hour_without_energy_readings_says_unknown_not_zero(l4_priced, world):
    sc = l4_priced
    url = f"{sc.sim.url}/metrics/dcgm"
    samples = [replace(s, energy_mj=None) for s in dcgm.scrape(url)]
    usage_scrape_record(cluster=sc.cluster, url=url, samples=samples, scraped_at=H10)
    rows = UsageHour.objects.filter(hour=H10 - timedelta(hours=1)) | UsageHour.objects.filter(
        hour=H10
    )
    assert rows.exists() and all(r.energy_joules is None for r in rows)
