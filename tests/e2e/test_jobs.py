"""Job journeys in Chromium: submit and watch a job run, read why a job waits, approve a job."""

import re
import threading
from datetime import datetime

import pytest
from django.db import connection
from playwright.sync_api import expect

from queues.models import ApprovalPolicy, Job
from queues.services.jobs.apply import job_apply
from queues.services.jobs.sync import jobs_sync_cluster
from queues.services.jobs.watch import ClusterWatcher
from tests.e2e.conftest import fill_job_form, open_section
from tests.factories import PASSWORD
from tests.queues.builders import submit

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def scraper(sim_jobs_tx):
    """billing's DCGM scrape of kubesim's exporter every second (beat does it every 30 s)."""
    from billing.tasks import scrape_dcgm

    cluster = sim_jobs_tx["cluster"]
    cluster.dcgm_scrape_urls = [f"{sim_jobs_tx['sim'].sim.url}/metrics/dcgm"]
    cluster.save(update_fields=["dcgm_scrape_urls"])
    stop = threading.Event()

    def scrape():
        while not stop.wait(1.0):
            scrape_dcgm()
        connection.close()

    thread = threading.Thread(target=scrape, daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join(timeout=10)


@pytest.fixture
def watcher(sim_jobs_tx, monkeypatch):
    """The watch_jobs loop for the kubesim cluster, running in this process."""
    monkeypatch.setattr("queues.services.jobs.watch.WATCH_TIMEOUT_SECONDS", 2)
    stop = threading.Event()
    w = ClusterWatcher(sim_jobs_tx["cluster"], stop)
    threads = w.start()
    yield w
    stop.set()
    w.dirty.set()
    for thread in threads:
        thread.join(timeout=5)


# The states and events of a job's run, in the order they happen.
STORY = ["Submitted", "Queued", "QuotaReserved", "Admitted", "Scheduled", "Started", "Running",
         "Succeeded"]  # fmt: skip


def test_researcher_submits_a_two_worker_job_and_watches_it_run(
    page, login, sim_jobs_tx, celery_worker_process, watcher, scraper
):
    """From Submit to its end without a reload: state and pods, then its logs and its GPU
    samples appear by themselves, and the timeline tells the story in order."""
    login("alice", PASSWORD)
    page.get_by_role("link", name="Jobs", exact=True).click()
    page.get_by_role("link", name="Submit a job").click()
    fill_job_form(page, name="Two workers", workers=2, gpus=2, expected=8)
    # The live preview shows the exact objects before anything is created.
    preview = page.get_by_test_id("yaml-preview")
    expect(preview).to_contain_text("completionMode: Indexed")
    expect(preview).to_contain_text("kind: Service")
    expect(preview).to_contain_text("nvidia.com/gpu: '2'")
    assert not Job.objects.exists()
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator(".messages")).to_contain_text("submitted")
    page.evaluate("window.__sameDocument = true")

    state = page.get_by_test_id("job-state")
    expect(page.get_by_test_id("logs")).to_contain_text("No pods yet")
    expect(page.get_by_test_id("usage")).to_contain_text("No GPU samples for this job yet")
    expect(state).to_have_text("Running", timeout=30_000)
    expect(page.get_by_test_id("pods")).to_contain_text("a100-node")
    # The logs panel shows the pods once the status does, and the open one's lines arrive.
    expect(page.get_by_test_id("log-lines").first).to_contain_text(
        "starting on a100-node-", timeout=15_000
    )
    expect(page.get_by_test_id("usage-facts")).to_contain_text("GPU-hours held", timeout=20_000)
    expect(state).to_have_text("Succeeded", timeout=30_000)
    expect(page.get_by_test_id("log-lines").first).to_contain_text(
        "training finished after", timeout=15_000
    )
    # The timeline is one story: it opens with the submission (no cluster event before it),
    # Kueue's "Admitted" is told once, each pod is scheduled before its container starts,
    # the times never go back, and each carries its zone.
    timeline = page.locator(".job-timeline li")
    labels = timeline.locator("strong").all_inner_texts()
    texts = timeline.all_inner_texts()
    story = [label for label in labels if label in STORY]
    assert story == sorted(story, key=STORY.index), labels
    assert labels[0] == "Submitted" and story[-1] == "Succeeded", labels
    assert labels.count("Admitted") == 1, labels
    job = Job.objects.get()
    for pod in job.pods.values_list("name", flat=True):
        told = [label for label, text in zip(labels, texts, strict=True) if f"Pod/{pod}:" in text]
        assert "Scheduled" in told and "Started" in told, (pod, told)
        assert told.index("Scheduled") < told.index("Started"), (pod, told)
    times = page.locator(".job-timeline time")
    assert all(t.endswith(" UTC") for t in times.all_inner_texts()), times.all_inner_texts()
    stamps = [
        datetime.fromisoformat(at).replace(microsecond=0)
        for at in times.evaluate_all("ts => ts.map(t => t.getAttribute('datetime'))")
    ]
    assert stamps == sorted(stamps), list(zip(labels, stamps, strict=True))
    # The page updated in place: no reload or navigation happened.
    assert page.evaluate("window.__sameDocument === true")
    assert job.pods.filter(phase="Succeeded").count() == 2


def test_over_quota_job_shows_why_it_waits_and_its_position(page, login, sim_jobs_tx):
    big = submit(sim_jobs_tx, name="big", gpus_per_worker=8, expected_runtime_seconds=900)
    job_apply(job_id=big.pk)
    for _ in range(50):
        jobs_sync_cluster(cluster=big.cluster)
        big.refresh_from_db()
        if big.state == Job.State.RUNNING:
            break
    waiting = submit(sim_jobs_tx, name="waits", gpus_per_worker=8)
    job_apply(job_id=waiting.pk)
    jobs_sync_cluster(cluster=big.cluster)
    jobs_sync_cluster(cluster=big.cluster)

    login("alice", PASSWORD)
    page.goto(f"/jobs/{waiting.pk}/")
    reason = page.get_by_test_id("pending-reason")
    expect(reason).to_contain_text("Waiting for 8 A100-SXM4-80GB GPUs")
    expect(reason).to_contain_text("your team's quota is 8 (8 in use)")
    expect(reason).to_contain_text("the department has 4 idle to lend")
    expect(reason).to_contain_text("Only 4 of the 8 it needs are free now")
    expect(page.get_by_test_id("queue-position")).to_contain_text("Position 1")
    expect(page.get_by_test_id("estimated-start")).to_contain_text("an estimate")
    page.goto("/jobs/team/vision/queue/")
    expect(page.get_by_test_id("queue")).to_contain_text("waits")


def test_lead_approves_a_held_job(page, login, sim_jobs_tx):
    ApprovalPolicy.objects.update(max_gpus_without_approval=2)
    held = submit(sim_jobs_tx, name="needs ok", gpus_per_worker=4)
    assert held.state == Job.State.PENDING_APPROVAL

    login("alice", PASSWORD)
    page.goto(f"/jobs/{held.pk}/")
    expect(page.get_by_test_id("pending-reason")).to_contain_text("Waiting for a team lead")
    expect(page.get_by_role("button", name="Approve")).to_have_count(0)
    page.get_by_role("button", name="Log out").click()

    login("bob", PASSWORD)
    page.goto(f"/jobs/{held.pk}/")
    page.get_by_role("button", name="Approve").click()
    expect(page.locator(".messages")).to_contain_text("Approved")
    expect(page.get_by_test_id("job-state")).to_have_text(re.compile("Submitted|Queued"))
    expect(page.locator(".job-timeline")).to_contain_text("Approved by bob")
    held.refresh_from_db()
    assert held.approved_by.username == "bob"


def test_a_lead_cannot_approve_their_own_job_the_manager_does(page, login, sim_jobs_tx):
    """Four eyes: Bob is vision's only lead, so his held job goes to Research's manager."""
    ApprovalPolicy.objects.update(max_gpus_without_approval=2)
    held = submit(sim_jobs_tx, user="bob", name="bobs big run", gpus_per_worker=4)

    login("bob", PASSWORD)
    page.goto(f"/jobs/{held.pk}/")
    expect(page.get_by_test_id("approvers")).to_contain_text("a manager of Research (maria)")
    expect(page.get_by_role("button", name="Approve")).to_have_count(0)
    page.goto("/")
    expect(page.get_by_text("Jobs waiting for your approval")).to_have_count(0)
    page.get_by_role("button", name="Log out").click()

    login("maria", PASSWORD)
    page.get_by_role("link", name="bobs big run").click()
    page.get_by_label("Reason for rejecting").fill("")
    page.get_by_role("button", name="Approve").click()
    expect(page.locator(".messages")).to_contain_text("Approved")
    expect(page.locator(".job-timeline")).to_contain_text("Approved by maria")


def test_cancelling_asks_first(page, login, sim_jobs_tx):
    job = submit(sim_jobs_tx, name="to cancel", gpus_per_worker=1)
    login("alice", PASSWORD)
    page.goto(f"/jobs/{job.pk}/")
    page.get_by_role("button", name="Cancel job").click()
    expect(page.get_by_test_id("job-state")).to_have_text("Cancelled")
    assert page.dialogs == ["Cancel this job? Its pods are stopped and it cannot be resumed."]


def test_a_researcher_starts_a_sweep_and_cancels_it(page, login, sim_jobs_tx):
    page.set_viewport_size({"width": 1280, "height": 900})
    login("alice", PASSWORD)
    page.goto("/jobs/new/")
    # The advanced fields are folded: Submit comes right after the basic ones.
    submit_button = page.get_by_role("button", name="Submit job")
    form = page.locator("#job-form").bounding_box()
    assert form["height"] < 1500, form  # every field open, it was 3,400 px
    assert page.locator("#job-form details[open]").count() == 0
    first_section = page.locator("#job-form details").first.bounding_box()
    assert submit_button.bounding_box()["y"] - first_section["y"] < 400
    fill_job_form(page, name="lr search", workers=1, gpus=1, expected=600)
    open_section(page, "Sweep")
    page.get_by_label("Sweep over (optional)").fill("LR=0.1,0.01,0.001\n--seed=1,2")
    # The preview says how many jobs the sweep makes before anything is made.
    expect(page.get_by_test_id("sweep-count")).to_contain_text("This sweep creates 6 jobs")
    assert not Job.objects.exists()
    page.get_by_role("button", name="Submit job").click()
    # Six jobs made in one request: on a loaded machine it takes more than expect's 5 s.
    expect(page.locator(".messages")).to_contain_text("Sweep “lr search”: 6 jobs.", timeout=20_000)
    rows = page.get_by_test_id("sweep-jobs").locator("tbody tr")
    expect(rows).to_have_count(6)
    expect(rows.first).to_contain_text("lr search [LR=0.1 --seed=1]")
    page.get_by_role("button", name="Cancel sweep").click()
    expect(page.locator(".messages")).to_contain_text("Cancelled 6 jobs.")
    assert "Cancel every job of this sweep" in page.dialogs[-1]
    expect(rows.locator("[data-testid=job-state]")).to_have_text(["Cancelled"] * 6)
    assert set(
        Job.objects.filter(name__startswith="lr search").values_list("state", flat=True)
    ) == {"cancelled"}


def test_a_researcher_follows_a_running_jobs_log(page, login, sim_jobs_tx):
    from tests.queues.builders import sync_until

    job = submit(sim_jobs_tx, name="followed", gpus_per_worker=1, expected_runtime_seconds=120)
    job_apply(job_id=job.pk)
    sync_until(job, Job.State.RUNNING)
    login("alice", PASSWORD)
    page.goto(f"/jobs/{job.pk}/")
    lines = page.get_by_test_id("log-lines")
    expect(lines).to_contain_text("[rank 0] starting on a100-node-")
    expect(lines).to_contain_text("step 3 loss=", timeout=10_000)  # new lines arrive by themselves
    page.get_by_label(f"Search the log of {job.pods.get().name}").fill("step 2 ")
    expect(lines.locator(".log-line:visible")).to_have_count(1)
    expect(lines.locator(".log-line:visible")).to_contain_text("step 2 loss=")
    # On a phone the running job's page (pods table, timeline, log) does not scroll sideways.
    page.set_viewport_size({"width": 390, "height": 844})
    expect(lines).to_contain_text("step 5 loss=", timeout=10_000)
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


# A log box a few lines tall, so that a log overflows it within seconds (the rule under test,
# app.js's, is the same at any height).
SHORT_LOG_BOXES = """document.addEventListener("DOMContentLoaded", () => {
  const style = document.createElement("style");
  style.textContent = "pre.log { max-height: 5rem; }";
  document.head.append(style);
});"""
AT_END = "pre => pre.scrollHeight - pre.scrollTop - pre.clientHeight < 8"


def test_follow_keeps_a_logs_end_in_view_until_the_reader_scrolls_up(page, login, sim_jobs_tx):
    from tests.queues.builders import sync_until

    done = submit(sim_jobs_tx, name="done", gpus_per_worker=1, expected_runtime_seconds=8)
    job = submit(sim_jobs_tx, name="followed", gpus_per_worker=1, expected_runtime_seconds=300)
    job_apply(job_id=done.pk)
    job_apply(job_id=job.pk)
    sync_until(done, Job.State.SUCCEEDED, timeout=40)
    page.context.add_init_script(SHORT_LOG_BOXES)
    login("alice", PASSWORD)

    # A finished job's log opens at its end.
    page.goto(f"/jobs/{done.pk}/")
    log = page.get_by_test_id("log-lines")
    expect(log).to_contain_text("training finished after")
    assert log.evaluate("pre => pre.scrollHeight > pre.clientHeight")  # it overflows
    assert log.evaluate(AT_END)
    expect(page.get_by_role("checkbox", name="Follow")).not_to_be_checked()

    # A running job's log: new lines arrive and the end stays in view.
    page.goto(f"/jobs/{job.pk}/")
    log = page.get_by_test_id("log-lines")
    expect(log).to_contain_text("step 4 loss=", timeout=15_000)
    assert log.evaluate(AT_END)
    lines = log.locator(".log-line").count()
    expect(log).to_contain_text(f"step {lines - 1} loss=", timeout=10_000)  # two more lines
    assert log.evaluate(AT_END)
    # Scrolled up, the reader stays where they are while lines keep arriving below.
    log.evaluate("pre => { pre.scrollTop = 0; }")
    more = log.locator(".log-line").count()
    expect(log).to_contain_text(f"step {more - 1} loss=", timeout=10_000)
    assert log.evaluate("pre => pre.scrollTop") == 0
    # Back at the end, it follows again.
    log.evaluate("pre => { pre.scrollTop = pre.scrollHeight; }")
    again = log.locator(".log-line").count()
    expect(log).to_contain_text(f"step {again - 1} loss=", timeout=10_000)
    assert log.evaluate(AT_END)
    # Follow off: the box is no longer asked for lines.
    page.get_by_role("checkbox", name="Follow").uncheck()
    page.wait_for_timeout(2500)  # a poll that would have happened
    still = log.locator(".log-line").count()
    page.wait_for_timeout(3000)
    assert log.locator(".log-line").count() == still
