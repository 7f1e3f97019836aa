"""Ingestion from a real Prometheus: exact figures from generated blocks, and a live scrape."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from billing import dcgm
from billing.models import IngestState, UsageHour
from billing.selectors.reports import build_report
from billing.selectors.usage import hours_missing
from billing.services.usage import usage_hour_ingest, usage_hour_replace, usage_scrape_record
from tests.billing.conftest import make_job, make_price, run_pod
from tests.billing.prom import (
    create_blocks,
    prometheus_available,
    promtool_available,
    running_prometheus,
)


@pytest.fixture(autouse=True)
def _prometheus_installed():
    # `make test` installs Debian's prometheus (with promtool); a missing one is a setup error.
    if not (prometheus_available() and promtool_available()):
        pytest.fail("prometheus and promtool are missing: run `make test`, which installs them")


H = datetime(2026, 10, 5, 10, 0, tzinfo=UTC)
STEP = 30


def _series(name, labels, points):
    body = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return [f"{name}{{{body}}} {value} {ts}" for ts, value in points]


def dataset() -> list[tuple[dict, list[tuple[int, bool, float]]]]:
    """Series (labels, [(timestamp, held, energy mJ)]) with known answers for hour H.

    A sample stands for the 30 s before it, so hour H holds the samples of (H, H+1h]: ticks
    1..120 after H.
    """
    t0 = int(H.timestamp())

    def ticks(first, last, skip=range(0)):
        return [t0 + STEP * i for i in range(first, last + 1) if i not in skip]

    a = {"UUID": "GPU-a", "Hostname": "node-l4-0", "modelName": "NVIDIA L4", "gpu": "0"}
    target = {"job": "dcgm", "instance": "exporter:9400"}
    b = {"UUID": "GPU-b", "hostname": "node-l4-1", "modelName": "NVIDIA L4", "gpu": "0",
         **target, "pod": "dcgm-exporter-abc", "namespace": "gpu-operator"}  # fmt: skip
    c = {"UUID": "GPU-c", "hostname": "node-x", "modelName": "NVIDIA H200", "gpu": "0",
         **target, "pod": "dcgm-exporter-abc", "namespace": "gpu-operator"}  # fmt: skip
    d = {"UUID": "GPU-d", "Hostname": "node-new", "modelName": "NVIDIA L4", "gpu": "0"}
    a_held = {**a, "pod": "p1", "namespace": "ns-vision", "container": "main"}
    b_held = {**b, "exported_pod": "p2", "exported_namespace": "ns-nlp"}
    # 100 W while held: 3,000,000 mJ per 30 s.
    return [
        # GPU-a: p1 for 80 samples (40 min), then idle for 40, and one in the next hour.
        (a_held, [(t, True, 1e9 + 3e6 * k) for k, t in enumerate(ticks(1, 80))]),
        (a, [(t, False, 2e9) for t in ticks(81, 121)]),
        # GPU-b: p2 (exported_* labels) all hour, but 20 samples (10 min) missing.
        (b_held, [(t, True, 5e9 + 3e6 * k) for k, t in enumerate(ticks(1, 120, range(41, 61)))]),
        # GPU-c: a model without a price, idle, behind the same relabelling target.
        (c, [(t, False, 7e9) for t in ticks(1, 120)]),
        # GPU-d: a node added at 10:30, idle from then on.
        (d, [(t, False, 8e9) for t in ticks(61, 120)]),
    ]


def values(held: bool) -> dict[str, float]:
    return {
        "DCGM_FI_DEV_GPU_UTIL": 50 if held else 0,
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.5 if held else 0,
        "DCGM_FI_DEV_FB_USED": 1000 if held else 0,
    }


def known_dataset() -> str:
    """dataset() as OpenMetrics text, for promtool."""
    out = []
    for name in values(True):
        out.append(f"# TYPE {name} gauge")
        for labels, points in dataset():
            out += _series(name, labels, [(t, values(held)[name]) for t, held, _ in points])
    energy = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
    out.append(f"# TYPE {energy} counter")
    for labels, points in dataset():
        out += _series(energy, labels, [(t, mj) for t, _, mj in points])
    out.append("# EOF")
    return "\n".join(out) + "\n"


@pytest.fixture(scope="module")
def known_prometheus(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("prom")
    source = tmp / "known.om"
    source.write_text(known_dataset())
    create_blocks(source, tmp / "data")
    with running_prometheus(data_dir=tmp / "data") as url:
        yield url


@pytest.fixture
def billing_world(world, prod, settings, known_prometheus):
    settings.PROMETHEUS_URL = known_prometheus
    settings.DCGM_SCRAPE_INTERVAL = STEP
    make_price(prod["l4"], "1.2000")
    job = make_job(world["vision"], world["alice"], pod="p1")
    return {**prod, "job": job, **world}


def _rows():
    return {(r.gpu_uuid, r.pod): r for r in UsageHour.objects.filter(hour=H).select_related("team")}


def test_known_hour_exact_figures(billing_world):
    w = billing_world
    state = usage_hour_ingest(cluster=w["cluster"], hour=H)
    assert state.state == IngestState.State.DONE
    rows = _rows()
    assert set(rows) == {
        ("GPU-a", "p1"), ("GPU-a", ""), ("GPU-b", "p2"), ("GPU-c", ""), ("GPU-d", ""),
    }  # fmt: skip
    d = rows[("GPU-d", "")]  # appeared at 10:30: half an hour of idle capacity, no gap
    assert d.seconds_idle == 1800 and not d.flag_gap
    p1 = rows[("GPU-a", "p1")]
    assert (p1.seconds_allocated, p1.sample_count, p1.seconds_busy) == (2400, 80, 1200)
    assert p1.team == w["vision"] and p1.job == w["job"] and p1.util_mean == 50
    assert p1.energy_joules == pytest.approx(79 * 3000)
    assert p1.memory_used_mib_max == 1000 and not p1.flag_gap
    assert w["job"].pods.get().gpu_uuids == ["GPU-a"]  # learned from the series' labels
    idle_a = rows[("GPU-a", "")]
    assert idle_a.seconds_idle == 1200 and idle_a.sample_count == 40  # 11:00:00 is next hour's
    p2 = rows[("GPU-b", "p2")]  # exported_pod/exported_namespace, lower-case hostname
    assert p2.seconds_allocated == 3000 and p2.team == w["nlp"] and p2.job is None
    assert p2.node == "node-l4-1" and p2.flag_gap
    c = rows[("GPU-c", "")]  # the exporter's own pod label is not a workload
    assert c.seconds_idle == 3600 and c.flag_unknown_model and c.team is None

    report = build_report(month=H.date().replace(day=1))
    teams = {t["team"]: t for t in report["teams"]}
    assert teams["vision"]["cost"] == "0.80"  # 2400 s × 1.20 / 3600
    assert teams["nlp"]["cost"] == "1.00"
    assert teams["nlp"]["flags"]["gap"] == 1
    assert report["unknown_models"] == [{"model_name": "NVIDIA H200", "gpu_hours": "1.0000"}]


def test_reingestion_is_idempotent_and_chunked(billing_world, settings):
    w = billing_world
    usage_hour_ingest(cluster=w["cluster"], hour=H)
    first = {k: (r.pk, r.seconds_allocated, r.seconds_idle) for k, r in _rows().items()}
    # A tiny sample budget forces one node per chunk and the hour split into sub-ranges.
    settings.BILLING_MAX_QUERY_SAMPLES = 100
    state = usage_hour_ingest(cluster=w["cluster"], hour=H)
    assert 0 < state.largest_query_samples <= 100
    second = {k: (r.pk, r.seconds_allocated, r.seconds_idle) for k, r in _rows().items()}
    assert first == second
    assert UsageHour.objects.count() == 5


def test_unreachable_prometheus_keeps_rows(billing_world, settings):
    w = billing_world
    usage_hour_ingest(cluster=w["cluster"], hour=H)
    settings.PROMETHEUS_URL = "http://127.0.0.1:9"
    with pytest.raises(dcgm.MetricsError):
        usage_hour_ingest(cluster=w["cluster"], hour=H)
    assert IngestState.objects.get(hour=H).state == IngestState.State.FAILED
    assert UsageHour.objects.filter(hour=H).count() == 5
    assert H in hours_missing(cluster=w["cluster"], now=H + timedelta(hours=2))


def test_plan_chunks_respects_limit():
    chunks = dcgm.plan_chunks({"a": 100, "b": 100, "c": 300}, points=120, limit=25_000)
    assert sorted(c.nodes for c in chunks) == [["a", "b"], ["c"]]
    assert all(c.samples_per_query <= 25_000 for c in chunks)
    big = dcgm.plan_chunks({"huge": 10_000}, points=3600, limit=25_000_000)
    assert big[0].windows == 2 and big[0].samples_per_query <= 25_000_000


def test_live_prometheus_scraping_kubesim(l4_priced, world, settings):
    """kubesim → Prometheus (1 s scrapes) → ingestion of the hour in progress."""
    sc = l4_priced
    settings.DCGM_SCRAPE_INTERVAL = 1
    host = sc.sim.url.split("//", 1)[1]
    with running_prometheus(targets=[host], interval="1s") as url:
        settings.PROMETHEUS_URL = url
        client = dcgm.Prometheus()
        deadline = time.monotonic() + 20
        while not client.query("up == 1", datetime.now(UTC)) and time.monotonic() < deadline:
            time.sleep(0.5)
        time.sleep(2)
        run_pod(sc.api_client, namespace=world["vision"].namespace, name="live", gpus=1,
                accelerator="nvidia-l4", duration=10)  # fmt: skip
        time.sleep(13)
        now = datetime.now(UTC)
        hour = dcgm.hour_start(now - timedelta(seconds=10))
        usages, stats = dcgm.prometheus_hour_usage(hour=hour)
        usage_hour_replace(cluster=sc.cluster, hour=hour, usages=usages)
    row = UsageHour.objects.get(pod="live")
    # The pod ran 10 s; at 1 s scrapes the count is within a sample or two of it.
    assert 8 <= row.seconds_allocated <= 12
    assert row.team == world["vision"]
    assert stats["series"] >= 28
    assert Decimal(row.seconds_allocated) * Decimal("1.2") / 3600 > 0


COMPARED = (
    "gpu_uuid", "pod", "namespace", "node", "model_name", "gpu_model_id", "team_id", "job_id",
    "seconds_allocated", "seconds_idle", "seconds_busy", "sample_count", "util_mean",
    "memory_used_mib_mean", "memory_used_mib_max", "energy_joules", "flag_gap",
    "flag_stuck_zero", "flag_unknown_model",
)  # fmt: skip


def _snapshot():
    return sorted(UsageHour.objects.filter(hour=H).values_list(*COMPARED))


def test_scrape_and_prometheus_give_the_same_rows(billing_world):
    """The same samples, through Prometheus or through the direct scrape, give the same rows."""
    w = billing_world
    usage_hour_ingest(cluster=w["cluster"], hour=H)
    from_prometheus = _snapshot()
    UsageHour.objects.all().delete()
    series = dataset()
    relabelled = dcgm.relabelled_targets([labels for labels, _ in series])
    by_time: dict[int, list] = {}
    for labels, points in series:
        sid = dcgm.series_id(labels, relabelled)
        for t, held, mj in points:
            v = values(held)
            by_time.setdefault(t, []).append(
                dcgm.GpuSample(
                    sid=sid,
                    util=v["DCGM_FI_DEV_GPU_UTIL"],
                    gr_active=v["DCGM_FI_PROF_GR_ENGINE_ACTIVE"],
                    fb_used=v["DCGM_FI_DEV_FB_USED"],
                    energy_mj=mj,
                )  # fmt: skip
            )
    for t in sorted(by_time):
        usage_scrape_record(
            cluster=w["cluster"], url="http://exporter:9400/metrics", samples=by_time[t],
            scraped_at=datetime.fromtimestamp(t, UTC),
        )  # fmt: skip
    assert _snapshot() == from_prometheus
    assert len(from_prometheus) == 5
