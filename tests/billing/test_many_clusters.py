"""Billing over several clusters (two kubesims): each cluster's DCGM exporter is scraped and
its GPUs are credited to it, never to another, and the finance report breaks the month's cost
down per cluster, adding up to its total to the cent."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from billing import dcgm
from billing.models import ScrapeState, UsageHour
from billing.selectors.reports import build_report
from billing.services.usage import usage_scrape_record
from billing.tasks import scrape_dcgm
from fleet.models import GpuPrice
from tests.billing.conftest import make_job, make_price, run_pod
from tests.fixtures_cluster import make_sim_cluster

H10 = datetime(2026, 10, 5, 10, 0, tzinfo=UTC)


def test_each_cluster_is_billed_from_its_own_exporter_and_reported_apart(world, settings):
    settings.DCGM_SCRAPE_URLS = []  # each cluster names its exporters
    settings.PROMETHEUS_URL = ""
    with make_sim_cluster(name="east") as east, make_sim_cluster(name="west") as west:
        for sc in (east, west):
            sc.sync()
            sc.cluster.dcgm_scrape_urls = [f"{sc.sim.url}/metrics/dcgm"]
            sc.cluster.save()
        if not GpuPrice.objects.exists():
            make_price(east.gpu_models["L4"], "1.2000")
        vision, nlp = world["vision"], world["nlp"]
        make_job(vision, world["alice"], name="east-train", pod="train-east")
        make_job(nlp, world["carol"], name="west-train", pod="train-west")
        run_pod(east.api_client, namespace=vision.namespace, name="train-east", gpus=2,
                accelerator="nvidia-l4")  # fmt: skip
        run_pod(west.api_client, namespace=nlp.namespace, name="train-west", gpus=1,
                accelerator="nvidia-l4")  # fmt: skip

        # An hour of 30 s scrapes of each, at known times, for exact figures.
        for sc in (east, west):
            url = f"{sc.sim.url}/metrics/dcgm"
            samples = dcgm.scrape(url)
            for k in range(121):
                usage_scrape_record(cluster=sc.cluster, url=url, samples=samples,
                                    scraped_at=H10 + timedelta(seconds=30 * k))  # fmt: skip
        # Then the beat's scrape reads both exporters, each for its own cluster.
        scrape_dcgm()
        states = {s.url: s.cluster for s in ScrapeState.objects.all()}
        assert states == {
            f"{east.sim.url}/metrics/dcgm": east.cluster,
            f"{west.sim.url}/metrics/dcgm": west.cluster,
        }
        east_rows = UsageHour.objects.filter(hour=H10, cluster=east.cluster).exclude(pod="")
        west_rows = UsageHour.objects.filter(hour=H10, cluster=west.cluster).exclude(pod="")
        assert {(r.pod, r.team_id) for r in east_rows} == {("train-east", vision.pk)}
        assert east_rows.count() == 2
        assert {(r.pod, r.team_id) for r in west_rows} == {("train-west", nlp.pk)}

        report = build_report(month=H10.date().replace(day=1))
        clusters = {c["cluster"]: c for c in report["clusters"]}
        assert set(clusters) == {"east", "west"}
        assert sum(Decimal(c["cost"]) for c in clusters.values()) == Decimal(
            report["totals"]["cost"]
        )
        # Each cluster's GPU-hours are the hours its own rows hold, no more, no less.
        for sc in (east, west):
            seconds = sum(
                UsageHour.objects.filter(cluster=sc.cluster, hour__month=10).values_list(
                    "seconds_allocated", flat=True
                )
            )
            hours = Decimal(clusters[sc.cluster.name]["gpu_hours_allocated"])
            assert abs(hours - Decimal(seconds) / 3600) < Decimal("0.0001")
        # The teams' jobs ran one on each cluster: vision's 2 GPUs, nlp's 1.
        teams = {t["team"]: t for t in report["teams"]}
        vision_hours = Decimal(teams["vision"]["gpu_hours_allocated"])
        nlp_hours = Decimal(teams["nlp"]["gpu_hours_allocated"])
        assert nlp_hours > 1 and abs(vision_hours - 2 * nlp_hours) <= Decimal("0.0001")
