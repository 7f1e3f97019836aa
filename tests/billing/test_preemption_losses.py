"""GPU-hours lost to preemption in the month's report (issue #35): recorded when a job is
preempted (since its last checkpoint in that run, or since the run began), summed per team,
shown on the report page and in the CSV and Excel exports, seen only by who sees the team."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.urls import reverse
from openpyxl import load_workbook

from queues.models import Job, JobCheckpoint, JobPreemption
from queues.services.jobs.lifecycle import job_transition
from tests.billing.conftest import make_job

S = Job.State
START = datetime(2026, 10, 5, 10, tzinfo=UTC)


def _run_then_preempt(job, *, minutes: int, checkpoint_after: int | None = None, at=START):
    """The job runs from `at` for `minutes`, saving `checkpoint_after` minutes in, then is
    preempted."""
    job_transition(job_id=job.pk, to_state=S.SUBMITTED, at=at)
    job_transition(job_id=job.pk, to_state=S.RUNNING, at=at)
    if checkpoint_after is not None:
        JobCheckpoint.objects.create(job=job, at=at + timedelta(minutes=checkpoint_after))
    job_transition(job_id=job.pk, to_state=S.PREEMPTED, at=at + timedelta(minutes=minutes))
    return JobPreemption.objects.filter(job=job).latest("at")


def test_the_loss_is_the_work_since_the_last_checkpoint_or_since_the_run_began(world):
    saved = make_job(world["vision"], world["alice"], name="saved", workers=2, gpus_per_worker=4)
    loss = _run_then_preempt(saved, minutes=90, checkpoint_after=60)
    # 8 GPUs × 30 minutes since the checkpoint.
    assert loss.lost_gpu_seconds == 8 * 30 * 60
    assert loss.checkpoint_at == START + timedelta(minutes=60)
    unsaved = make_job(world["vision"], world["alice"], name="unsaved", gpus_per_worker=2)
    loss = _run_then_preempt(unsaved, minutes=45)
    assert loss.lost_gpu_seconds == 2 * 45 * 60 and loss.checkpoint_at is None
    # A checkpoint of an earlier run is not this run's: the loss counts from the run's start.
    again = _run_then_preempt_again(saved, minutes=20)
    assert again.lost_gpu_seconds == 8 * 20 * 60 and again.checkpoint_at is None


def _run_then_preempt_again(job, *, minutes):
    second_start = START + timedelta(hours=3)
    job_transition(job_id=job.pk, to_state=S.RUNNING, at=second_start)
    job_transition(
        job_id=job.pk, to_state=S.PREEMPTED, at=second_start + timedelta(minutes=minutes)
    )
    return JobPreemption.objects.filter(job=job).latest("at")


def test_a_job_preempted_before_it_ran_lost_nothing(world):
    job = make_job(world["vision"], world["alice"], name="never-ran")
    job_transition(job_id=job.pk, to_state=S.SUBMITTED, at=START)
    job_transition(job_id=job.pk, to_state=S.PREEMPTED, at=START + timedelta(minutes=1))
    assert not JobPreemption.objects.filter(job=job).exists()


def test_the_report_and_its_exports_show_the_hours_lost_per_team(world, api_as, client):
    job = make_job(world["vision"], world["alice"], name="big", gpus_per_worker=4)
    _run_then_preempt(job, minutes=90, checkpoint_after=60)  # 4 × 0.5 h = 2 GPU-h
    other = make_job(world["nlp"], world["carol"], name="nlp-run", gpus_per_worker=1)
    _run_then_preempt(other, minutes=30)  # 0.5 GPU-h
    finance = api_as(world["frank"])
    url = reverse("billing-api-report", args=["2026-10"])
    report = finance.get(url).json()
    teams = {t["team"]: t for t in report["teams"]}
    assert teams["vision"]["preemption"] == {"gpu_hours_lost": "2.0000", "preemptions": 1,
                                             "jobs": 1}  # fmt: skip
    assert teams["nlp"]["preemption"]["gpu_hours_lost"] == "0.5000"
    rows = list(csv.DictReader(io.StringIO(finance.get(url, {"format": "csv"}).content.decode())))
    vision = next(r for r in rows if r["team"] == "vision" and r["gpu_hours_lost_to_preemption"])
    assert vision["gpu_hours_lost_to_preemption"] == "2.0000"
    assert vision["gpu_model"] == "work lost to preemption (1 preemptions)"
    assert Decimal(vision["cost"]) == 0
    total = next(r for r in rows if r["team"] == "TOTAL")
    assert total["gpu_hours_lost_to_preemption"] == "2.5000"
    ws = load_workbook(io.BytesIO(finance.get(url, {"format": "xlsx"}).content)).active
    header = [c.value for c in ws[1]]
    column = header.index("gpu_hours_lost_to_preemption")
    values = [row[column].value for row in ws.iter_rows(min_row=2) if row[column].value]
    assert [float(v) for v in values] == [0.5, 2.0, 2.5]  # Language, Vision (by name), total
    # A member of nlp sees nlp's loss, not vision's.
    carol = api_as(world["carol"]).get(url).json()
    assert {t["team"] for t in carol["teams"] if t.get("preemption")} == {"nlp"}
    client.force_login(world["frank"])
    page = client.get(reverse("billing-report", args=["2026-10"])).content.decode()
    assert "GPU-hours lost to preemption" in page
    assert 'data-team="vision"' in page and "2.00" in page


def test_a_month_without_preemptions_has_no_loss_section(world, client):
    client.force_login(world["frank"])
    page = client.get(reverse("billing-report", args=["2026-10"])).content.decode()
    assert "GPU-hours lost to preemption" not in page
