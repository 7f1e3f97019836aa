"""Ingestion from a real Prometheus: exact figures from generated blocks, and a live scrape."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from billing import dcgm, services
from billing.models import IngestState, UsageHour
from billing.reports import build_report
from fleet.models import Cluster, GpuModel
from tests.billing.conftest import make_job, make_price, run_pod
from tests.billing.prom import (
    create_blocks,
    prometheus_available,
    promtool_available,
    running_prometheus,
)

pytestmark = pytest.mark.skipif(
    not (prometheus_available() and promtool_available()), reason="needs prometheus and promtool"
)

H = datetime(2026, 10, 5, 10, 0, tzinfo=UTC)
STEP = 30


def _series(name, labels, points):
    body = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return [f"{name}{{{body}}} {value} {ts}" for ts, value in points]


def known_dataset() -> str:
    """One hour of DCGM samples every 30 s for three GPUs with known answers."""
    t0 = int(H.timestamp())
    a = {"UUID": "GPU-a", "Hostname": "node-l4-0", "modelName": "NVIDIA L4", "gpu": "0"}
    b_target = {"job": "dcgm", "instance": "exporter:9400"}
    b = {"UUID": "GPU-b", "hostname": "node-l4-1", "modelName": "NVIDIA L4", "gpu": "0",
         **b_target, "pod": "dcgm-exporter-abc", "namespace": "gpu-operator"}  # fmt: skip
    c = {"UUID": "GPU-c", "hostname": "node-x", "modelName": "NVIDIA H200", "gpu": "0",
         **b_target, "pod": "dcgm-exporter-abc", "namespace": "gpu-operator"}  # fmt: skip
    a_held = {**a, "pod": "p1", "namespace": "ns-vision", "container": "main"}
    b_held = {**b, "exported_pod": "p2", "exported_namespace": "ns-nlp"}
    # GPU-a: p1 for 80 samples (40 min), then idle for 40 and one more at 11:00:00 (next hour).
    a_p = [t0 + STEP * i for i in range(80)]
    a_i = [t0 + STEP * i for i in range(80, 121)]
    # GPU-b: p2 all hour, but 20 samples (10 min) missing.
    b_p = [t0 + STEP * i for i in range(120) if not 40 <= i < 60]
    c_i = [t0 + STEP * i for i in range(120)]
    # GPU-d: a node added at 10:30, idle from then on.
    d = {"UUID": "GPU-d", "Hostname": "node-new", "modelName": "NVIDIA L4", "gpu": "0"}
    d_i = [t0 + STEP * i for i in range(60, 120)]
    families = {
        "DCGM_FI_DEV_GPU_UTIL": ("gauge", lambda held: 50 if held else 0),
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("gauge", lambda held: 0.5 if held else 0),
        "DCGM_FI_DEV_FB_USED": ("gauge", lambda held: 1000 if held else 0),
    }
    out = []
    for name, (kind, value) in families.items():
        out.append(f"# TYPE {name} {kind}")
        out += _series(name, a_held, [(t, value(True)) for t in a_p])
        out += _series(name, a, [(t, value(False)) for t in a_i])
        out += _series(name, b_held, [(t, value(True)) for t in b_p])
        out += _series(name, c, [(t, value(False)) for t in c_i])
        out += _series(name, d, [(t, value(False)) for t in d_i])
    out.append("# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter")
    energy = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
    # 100 W while held: 3,000,000 mJ per 30 s.
    out += _series(energy, a_held, [(t, 1e9 + 3e6 * i) for i, t in enumerate(a_p)])
    out += _series(energy, a, [(t, 2e9) for t in a_i])
    out += _series(energy, b_held, [(t, 5e9 + 3e6 * i) for i, t in enumerate(b_p)])
    out += _series(energy, c, [(t, 7e9) for t in c_i])
    out += _series(energy, d, [(t, 8e9) for t in d_i])
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
def billing_world(world, settings, known_prometheus):
    settings.PROMETHEUS_URL = known_prometheus
    settings.DCGM_SCRAPE_INTERVAL = STEP
    cluster = Cluster.objects.create(name="prod", kubeconfig_path="/dev/null", is_default=True)
    l4 = GpuModel.objects.create(name="L4", dcgm_model_names=["NVIDIA L4"])
    make_price(l4, "1.2000")
    job = make_job(world["vision"], world["alice"], pod="p1")
    return {"cluster": cluster, "l4": l4, "job": job, **world}


def _rows():
    return {(r.gpu_uuid, r.pod): r for r in UsageHour.objects.filter(hour=H).select_related("team")}


def test_known_hour_exact_figures(billing_world):
    w = billing_world
    state = services.usage_hour_ingest(cluster=w["cluster"], hour=H)
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
    services.usage_hour_ingest(cluster=w["cluster"], hour=H)
    first = {k: (r.pk, r.seconds_allocated, r.seconds_idle) for k, r in _rows().items()}
    # A tiny sample budget forces one node per chunk and the hour split into sub-ranges.
    settings.BILLING_MAX_QUERY_SAMPLES = 100
    state = services.usage_hour_ingest(cluster=w["cluster"], hour=H)
    assert 0 < state.largest_query_samples <= 100
    second = {k: (r.pk, r.seconds_allocated, r.seconds_idle) for k, r in _rows().items()}
    assert first == second
    assert UsageHour.objects.count() == 5


def test_unreachable_prometheus_keeps_rows(billing_world, settings):
    w = billing_world
    services.usage_hour_ingest(cluster=w["cluster"], hour=H)
    settings.PROMETHEUS_URL = "http://127.0.0.1:9"
    with pytest.raises(dcgm.MetricsError):
        services.usage_hour_ingest(cluster=w["cluster"], hour=H)
    assert IngestState.objects.get(hour=H).state == IngestState.State.FAILED
    assert UsageHour.objects.filter(hour=H).count() == 5
    assert H in services.hours_missing(cluster=w["cluster"], now=H + timedelta(hours=2))


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
        services.usage_hour_replace(cluster=sc.cluster, hour=hour, usages=usages)
    row = UsageHour.objects.get(pod="live")
    # The pod ran 10 s; at 1 s scrapes the count is within a sample or two of it.
    assert 8 <= row.seconds_allocated <= 12
    assert row.team == world["vision"]
    assert stats["series"] >= 28
    assert Decimal(row.seconds_allocated) * Decimal("1.2") / 3600 > 0
