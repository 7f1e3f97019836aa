"""Preemption protection in Chromium (issue #35): an admin gives the experiment tier a
guaranteed runtime; a researcher's running job says until when it is protected; once the window
is over and another team reclaims its GPUs, the job that saved last is the one preempted, its
page says why, and the month's report shows the GPU-hours lost."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from kubesim.testing import settle_all
from queues.models import Job, PriorityTier
from queues.services import protection
from queues.services.jobs.apply import job_apply
from queues.services.reconcile import cluster_reconcile
from tests.factories import PASSWORD
from tests.queues.builders import run_tasks_eagerly, submit, sync_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
S = Job.State


def _start(world, name, **kw):
    job = submit(world, name=name, gpus_per_worker=4, tier="experiment",
                 expected_runtime_seconds=36000, max_runtime_seconds=86400, **kw)  # fmt: skip
    job_apply(job_id=job.pk)
    return job


def test_protection_from_the_tier_page_to_the_months_report(page, login, sim_jobs_tx,
                                                             monkeypatch):  # fmt: skip
    run_tasks_eagerly(monkeypatch)
    world = sim_jobs_tx
    tier = PriorityTier.objects.get(name="experiment")

    login("admin", PASSWORD)
    page.goto(f"/quota/tiers/{tier.pk}/")
    runtime = page.get_by_label("Guaranteed runtime (minutes)")
    runtime.fill("-3")
    page.get_by_role("button", name="Save").click()
    expect(page.locator(".field-error").first).to_contain_text("greater than or equal to 0")
    page.get_by_label("Guaranteed runtime (minutes)").fill("10")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_test_id("protection-experiment")).to_have_text("10 min")
    cluster_reconcile(cluster_id=world["cluster"].pk)
    page.get_by_role("button", name="Log out").click()

    # vision borrows 4 of nlp's A100s with three 4-GPU jobs, protected once they run.
    jobs = [sync_until(_start(world, name), S.RUNNING) for name in ("one", "two", "three")]
    assert [j.state for j in jobs] == [S.RUNNING] * 3
    now = timezone.now()
    protection.protection_sweep(now=now)
    settle_all()
    login("alice", PASSWORD)
    page.goto(f"/jobs/{jobs[1].pk}/")
    until = page.get_by_test_id("protected-until")
    expect(until).to_contain_text("Protected from preemption until")
    expect(until).to_contain_text(f"{jobs[1].started_at + timedelta(minutes=10):%H:%M}")

    # The second job saves; past the window, nlp takes its GPUs back.
    protection.checkpoint_report(job=jobs[1], actor=world["alice"], step=700)
    protection.protection_sweep(now=now + timedelta(minutes=11))
    settle_all()
    reclaimer = submit(world, name="ours-back", user="carol", team="nlp", gpus_per_worker=4,
                       tier="experiment", max_runtime_seconds=86400)  # fmt: skip
    job_apply(job_id=reclaimer.pk)
    second = sync_until(jobs[1], S.PREEMPTED)
    assert second.state == S.PREEMPTED
    page.goto(f"/jobs/{second.pk}/")
    why = page.get_by_test_id("preemption-why")
    expect(why).to_contain_text("Chosen as a victim")
    expect(why).to_contain_text("because it saved")
    expect(why).to_contain_text("experiment-saved-15m")
    expect(page.get_by_test_id("last-checkpoint")).to_contain_text("step 700")
    page.get_by_role("button", name="Log out").click()

    login("frank", PASSWORD)
    page.goto(f"/billing/reports/{timezone.now():%Y-%m}/")
    losses = page.get_by_test_id("preemption-losses")
    expect(losses).to_contain_text("GPU-hours lost to preemption")
    expect(losses.locator('tr[data-team="vision"]')).to_contain_text("1")
