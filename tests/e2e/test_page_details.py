"""The smaller things a newcomer saw wrong, in Chromium: counts that agree with their numbers,
Resubmit only for the team's members, a short job's utilisation chart, GPU-hours to two
decimals, and a disabled cluster that announces no next try."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from fleet.models import Cluster
from queues.models import Job, JobPod
from tests.factories import PASSWORD
from tests.queues.builders import job_world_setup, submit

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def jw_tx(world):
    return job_world_setup(world)


def test_one_gpu_is_one_gpu_on_the_job_page_the_queue_and_home(page, login, jw_tx):
    job = submit(jw_tx, name="single", workers=1, gpus_per_worker=1)
    Job.objects.filter(pk=job.pk).update(state=Job.State.QUEUED)
    login("alice", PASSWORD)
    expect(page.locator("li", has=page.get_by_role("link", name="single"))).to_contain_text(
        "Vision · 1 GPU"
    )
    page.goto(f"/jobs/{job.pk}/")
    expect(page.get_by_test_id("workers")).to_have_text(re.compile(r"^1 × 1 GPU\b"))
    page.goto("/jobs/team/vision/queue/")
    expect(page.get_by_test_id("queue")).to_contain_text("· 1 GPU ·")
    for where in ("/", f"/jobs/{job.pk}/", "/jobs/team/vision/queue/"):
        page.goto(where)
        assert "1 GPUs" not in page.locator("main").inner_text(), where


def test_resubmit_is_offered_to_the_teams_members_only(page, login, jw_tx):
    job = submit(jw_tx, name="watched", gpus_per_worker=1)
    login("maria", PASSWORD)  # Research's manager: she may read vision's jobs, not submit them
    answer = page.goto(f"/jobs/{job.pk}/")
    assert answer.status == 200
    expect(page.get_by_test_id("workers")).to_be_visible()
    expect(page.get_by_role("link", name="Resubmit")).to_have_count(0)
    expect(page.get_by_role("button", name="Save as template")).to_have_count(0)
    page.context.clear_cookies()

    login("alice", PASSWORD)
    page.goto(f"/jobs/{job.pk}/")
    page.get_by_role("link", name="Resubmit").click()
    expect(page.get_by_label("Name", exact=True)).to_have_value("watched")


def test_a_short_jobs_use_is_charted_and_its_gpu_hours_have_two_decimals(page, login, jw_tx):
    """Twenty minutes of samples, all in one hour: by the hour the chart was one point."""
    from billing import dcgm
    from billing.services.usage import usage_scrape_record

    job = submit(jw_tx, name="short", gpus_per_worker=1)
    JobPod.objects.create(job=job, name="short-0", namespace=job.team.namespace, gpus=1)
    sid = dcgm.SeriesId(
        gpu_uuid="GPU-s", node="a100-0", model_name="A100-SXM4-80GB", mig_profile="",
        namespace=job.team.namespace, pod="short-0",
    )  # fmt: skip
    hour = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=2)
    for k in range(40):  # a scrape every 30 s from :02, 80 % for ten minutes then 20 %
        usage_scrape_record(
            cluster=jw_tx["cluster"], url="http://exporter",
            samples=[dcgm.GpuSample(sid=sid, util=80.0 if k < 20 else 20.0, fb_used=1000.0)],
            scraped_at=hour + timedelta(minutes=2, seconds=30 * (k + 1)),
        )  # fmt: skip
    login("alice", PASSWORD)
    page.goto(f"/jobs/{job.pk}/")
    expect(page.get_by_test_id("usage-facts")).to_contain_text("GPU-hours held")
    expect(page.get_by_test_id("util-chart-caption")).to_contain_text("per 5 minutes")
    line = page.get_by_test_id("util-chart").locator("polyline")
    points = line.get_attribute("points").split()
    assert len(points) == 5, points  # from :00, :05, :10, :15 and :20 of the hour
    heights = [float(p.split(",")[1]) for p in points]
    assert heights[0] < heights[-1]  # 80 % drawn higher (nearer the top) than 20 %
    box = line.bounding_box()
    assert box is not None and box["width"] > 100  # a line across the chart, not a dot
    facts = page.get_by_test_id("usage-facts")
    for name in ("GPU-hours held", "GPU-hours used"):
        shown = facts.locator("div", has=page.locator("dt", has_text=name)).locator("dd")
        expect(shown).to_have_text(re.compile(r"^\d+\.\d\d$"))  # 0.33, not 0.3333


def test_a_disabled_cluster_announces_no_next_try(page, login, jw_tx):
    from fleet.services.clusters import cluster_disable

    now = timezone.now()
    cluster = jw_tx["cluster"]
    Cluster.objects.filter(pk=cluster.pk).update(
        unreachable_since=now - timedelta(minutes=5), retry_at=now + timedelta(minutes=2)
    )
    login("admin", PASSWORD)
    page.goto("/fleet/")
    expect(page.locator("main")).to_contain_text("next try at")
    cluster_disable(actor=jw_tx["admin"], cluster=Cluster.objects.get(pk=cluster.pk),
                    reason="maintenance")  # fmt: skip
    page.reload()
    expect(page.get_by_test_id("cluster-disabled")).to_contain_text(
        "Disabled (maintenance): the portal does not try it until it is enabled again"
    )
    expect(page.locator("main")).not_to_contain_text("next try at")
