"""Every page that overflowed sideways on a phone (390 px) fits it now, as every role that can
see it, with long names and full tables: tables scroll inside their own box, long words wrap."""

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from billing.periods import month_start
from planning.services.whatif import whatif_create, whatif_execute
from queues.models import Job, Membership, PriorityTier
from queues.services.quotas import quota_request_create
from tests.e2e.conftest import fill_job_form
from tests.factories import (
    PASSWORD,
    BudgetFactory,
    GpuPriceFactory,
    JobFactory,
    TeamFactory,
    TeamSecretFactory,
    TeamVolumeFactory,
    UsageHourFactory,
)
from tests.queues.builders import quota_world_setup

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PHONE = {"width": 390, "height": 844}
ROLES = ("alice", "bob", "maria", "frank", "admin")
LONG = "distributed-data-parallel-finetuning-of-the-multilingual-speech-recognition-model-v2"

# What sticks out past the screen's right edge, outside any box that scrolls (for the message).
OVERFLOW = """() => {
  const width = window.innerWidth;
  const out = [];
  for (const el of document.querySelectorAll("body *")) {
    const box = el.getBoundingClientRect();
    let clipped = false;
    for (let up = el.parentElement; up && up !== document.body; up = up.parentElement) {
      if (getComputedStyle(up).overflowX !== "visible") { clipped = true; break; }
    }
    if (!clipped && box.right > width + 1 && el.offsetParent !== null) {
      const classes = typeof el.className === "string" && el.className
        ? "." + el.className.split(" ").join(".") : "";
      out.push(`${el.tagName.toLowerCase()}${el.id ? "#" + el.id : ""}${classes}` +
               ` right=${Math.round(box.right)}`);
    }
  }
  return out.slice(0, 8);
}"""


@pytest.fixture
def wide_world(world):
    """The pages' data as a real month gives it: several teams (one with a long name), usage
    of named jobs last month and this, prices with a history, budgets, volumes and secrets, a
    tier with a long description, and a what-if run."""
    w = quota_world_setup(world)
    speech = TeamFactory(
        slug="speech", department=w["research"],
        name="Speech recognition, synthesis and multilingual understanding",
    )  # fmt: skip
    Membership.objects.create(user=w["carol"], team=speech, role="member")
    a100, l4 = w["a100"], w["l4"]
    GpuPriceFactory(gpu_model=a100.gpu_model, price_per_hour=Decimal("3.1000"),
                    effective_from=datetime(2020, 1, 1, tzinfo=UTC),
                    effective_to=datetime(2024, 1, 1, tzinfo=UTC))  # fmt: skip
    GpuPriceFactory(gpu_model=a100.gpu_model, price_per_hour=Decimal("3.4500"),
                    effective_from=datetime(2024, 1, 1, tzinfo=UTC))  # fmt: skip
    GpuPriceFactory(gpu_model=l4.gpu_model, price_per_hour=Decimal("0.7500"))
    now = timezone.now()
    this_month = month_start(now)
    last_month = month_start(this_month - timedelta(days=1))
    tier = w["tiers"]["experiment"]
    for team, owner, pool in ((w["vision"], w["alice"], a100), (w["nlp"], w["carol"], a100),
                              (speech, w["carol"], l4)):  # fmt: skip
        for start in (last_month, this_month):
            job = JobFactory(team=team, owner=owner, tier=tier, pool=pool, cluster=w["cluster"],
                             name=f"{team.slug}-{LONG}", k8s_name=f"{team.slug}-{start:%m}",
                             state=Job.State.SUCCEEDED)  # fmt: skip
            for h in range(3):
                UsageHourFactory(
                    hour=datetime(start.year, start.month, 1, h, tzinfo=UTC),
                    cluster=w["cluster"], team=team, job=job, gpu_model=pool.gpu_model,
                    pool=pool, namespace=team.namespace, pod=f"{job.k8s_name}-{h}",
                    seconds_busy=2000, util_mean=55.5,
                )  # fmt: skip
        BudgetFactory(team=team, month=this_month, amount=Decimal("25000.00"))
    for k in range(2):
        TeamVolumeFactory(
            team=w["vision"], cluster=w["cluster"], name=f"datasets-{k}",
            storage_class="premium-rwo-regional-replicated-ssd-with-snapshots",
        )  # fmt: skip
    TeamSecretFactory(team=w["vision"], cluster=w["cluster"], name="wandb",
                      keys=["api-key", "entity-for-the-multilingual-speech-project"])  # fmt: skip
    PriorityTier.objects.filter(pk=tier.pk).update(
        description="Experiments that may be preempted by production work; checkpoint often."
    )
    # A day of history for the what-if replay, and its run.
    for k in range(4):
        started = now - timedelta(hours=20 - 2 * k)
        JobFactory(team=w["vision"], owner=w["alice"], tier=tier, pool=a100, cluster=w["cluster"],
                   workers=1, gpus_per_worker=8, state=Job.State.SUCCEEDED,
                   name=f"history-{k}-{LONG}", k8s_name=f"history-{k}",
                   submitted_at=started - timedelta(minutes=30),
                   started_at=started, finished_at=started + timedelta(hours=2),
                   max_runtime_seconds=4 * 3600)  # fmt: skip
    run = whatif_create(actor=w["maria"], name=f"double {LONG}", days=1, quotas=[
        {"team": "vision", "pool": a100.pk, "nominal_gpus": 16, "borrowing_limit": 4,
         "lending_limit": 2}])  # fmt: skip
    whatif_execute(run_id=run.pk)
    # A pending quota request, for the lead's and the manager's pages of it.
    quota_request_create(actor=w["bob"], team=w["vision"], pool=a100, nominal_gpus=12,
                         justification=f"Training {LONG} before the deadline.")  # fmt: skip
    # A long-named job of alice's for her home page.
    JobFactory(team=w["vision"], owner=w["alice"], tier=tier, pool=a100, cluster=w["cluster"],
               name="a" * 200, k8s_name="long-name", state=Job.State.QUEUED)  # fmt: skip
    return {**w, "speech": speech, "last_month": last_month, "run": run}


def test_every_listed_page_fits_a_phone_for_every_role_that_sees_it(page, login, wide_world):
    w = wide_world
    pages = {
        "fleet": "/fleet/",
        "budgets": "/billing/budgets/",
        "billing report": f"/billing/reports/{w['last_month']:%Y-%m}/",
        "team billing": "/billing/teams/vision/",
        "team storage": "/teams/vision/storage/",
        "tiers": "/quota/tiers/",
        "prices": "/billing/prices/",
        "what-if": "/quota/whatif/",
        "what-if run": f"/quota/whatif/{w['run'].pk}/",
        "home": "/",
    }
    page.set_viewport_size(PHONE)
    seen, wide = {}, []
    for user in ROLES:
        login(user, PASSWORD)
        for name, url in pages.items():
            answer = page.goto(url)
            if answer.status != 200:
                continue
            seen.setdefault(name, []).append(user)
            if (name, user) == ("home", "alice"):  # her 200-character job is listed there
                expect(page.get_by_role("link", name="a" * 200)).to_be_visible()
            if not page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"):
                wide.append((name, user, page.evaluate(OVERFLOW)))
        page.context.clear_cookies()  # signed out (the phone menu folds the button away)
    assert wide == [], "\n".join(f"{n} as {u}: {where}" for n, u, where in wide)
    # Each page was checked as the roles that can see it (none of them skipped unseen).
    assert seen["fleet"] == seen["tiers"] == seen["home"] == list(ROLES)
    assert {"frank", "admin"} <= set(seen["budgets"]) and {"frank", "admin"} <= set(seen["prices"])
    assert {"maria", "frank", "admin"} <= set(seen["billing report"])
    assert {"alice", "bob", "maria", "frank", "admin"} == set(seen["team billing"])
    assert {"alice", "bob"} <= set(seen["team storage"])
    assert set(seen["what-if"]) == set(seen["what-if run"]) == {"maria", "admin"}


def test_a_long_job_name_does_not_widen_the_submitted_message_on_a_phone(page, login, wide_world):
    page.set_viewport_size(PHONE)
    login("alice", PASSWORD)
    page.goto("/jobs/new/")
    fill_job_form(page, name="b" * 200, workers=1, gpus=1)
    page.get_by_role("button", name="Submit job").click()
    message = page.locator(".messages")
    expect(message).to_contain_text("b" * 200)
    box = message.bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], box
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), (
        page.evaluate(OVERFLOW)
    )


# Links a crawl does not follow: leaving, downloads and machine-readable answers.
NOT_PAGES = ("/accounts/logout", "/api/", "/export", "/download", "/metrics", "/admin/", ".csv",
             ".xlsx", ".json", ".yaml", "/static/", "/media/", "/oidc/")  # fmt: skip
LINKS = """() => Array.from(document.querySelectorAll("a[href]"), a => a.href)"""


def test_every_page_a_role_reaches_by_its_links_fits_a_phone(page, login, wide_world):
    """Not only the pages the issue listed: every page each role reaches from home by links
    (two clicks deep) has no sideways scroll at 390 px."""
    from urllib.parse import urlsplit

    page.set_viewport_size(PHONE)
    wide, checked = [], set()
    for user in ROLES:
        login(user, PASSWORD)
        todo, seen = [("/", 0)], {"/"}
        while todo:
            path, depth = todo.pop(0)
            answer = page.goto(path)
            if (
                answer is None
                or answer.status != 200
                or "html" not in (answer.headers.get("content-type") or "")
            ):
                continue
            checked.add(path)
            if not page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"):
                wide.append((path, user, page.evaluate(OVERFLOW)))
            if depth == 2:
                continue
            for href in page.evaluate(LINKS):
                parts = urlsplit(href)
                if parts.netloc != urlsplit(page.url).netloc or any(
                    bit in parts.path for bit in NOT_PAGES
                ):
                    continue
                if parts.path not in seen:
                    seen.add(parts.path)
                    todo.append((parts.path, depth + 1))
        page.context.clear_cookies()
    assert wide == [], "\n".join(f"{p} as {u}: {where}" for p, u, where in wide)
    assert len(checked) > 40, sorted(checked)
    assert any(re.fullmatch(r"/quota/requests/\d+/", path) for path in checked), sorted(checked)
