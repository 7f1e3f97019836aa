"""The what-if reads a recorded history as real clusters leave it (issue #34): jobs that failed
and were run again, jobs cancelled while running, jobs preempted before the window opened, a
delay before the cluster saw a job; and it says whether the replay of today's configuration
gives back what happened, and, where it does not, why (the page then leaves the recorded waits
out)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse

from planning.models import WhatIfRun
from planning.services.whatif import whatif_compute
from queues.models import AuditEvent, Job
from tests.factories import JobFactory, JobPodFactory
from tests.planning import test_whatif
from tests.planning.test_whatif import HOUR

history = test_whatif.history  # the fixture: six 8-GPU jobs of vision's, run one at a time

pytestmark = pytest.mark.django_db


def _at(w, hours):
    return w["end"] - timedelta(days=1) + timedelta(hours=hours)


def _job(w, *, at, **fields):
    values = {
        "team": w["vision"],
        "owner": w["alice"],
        "tier": w["tiers"]["experiment"],
        "pool": w["a100"],
        "cluster": w["cluster"],
        "workers": 1,
        "gpus_per_worker": 8,
        "state": Job.State.SUCCEEDED,
        "submitted_at": at,
        "max_runtime_seconds": 10 * HOUR,
    }
    values.update(fields)
    return JobFactory(**values)  # fmt: skip


def test_the_replay_of_the_history_agrees_with_it_and_says_so(history, client):
    w = history
    result = whatif_compute(days=1, proposal={}, now=w["end"])
    agreement = result["agreement"]
    assert agreement["agrees"] and agreement["reasons"] == [] and agreement["jobs_otherwise"] == 0
    vision = agreement["teams"][str(w["vision"].pk)]
    assert vision["p50"] == {"replayed": 2.5 * HOUR, "recorded": 2.5 * HOUR,
                             "difference_percent": 0.0, "agrees": True}  # fmt: skip
    run = WhatIfRun.objects.create(name="as is", created_by=w["maria"], days=1, proposal={},
                                   state=WhatIfRun.State.DONE, result=result)  # fmt: skip
    client.force_login(w["maria"])
    page = client.get(reverse("quota-whatif-detail", args=[run.pk])).content.decode()
    assert 'id="whatif-agreement" data-agrees="true"' in page
    assert "As it happened" in page and 'class="num as-it-happened"' in page
    # Waits read as people read them, not as raw seconds.
    assert '<span class="p50">2 h 30 min</span>' in page and "9000.0" not in page


def test_a_failed_worker_run_again_holds_the_quota_all_along(history):
    """A job whose worker failed at 1:30 and was run again to 3:00 held its 8 GPUs from 1:00 to
    3:00: the job behind it waits until 3:00 in the replay as it did, not until 2:30 (its
    longest pod) nor 1:30 (its first)."""
    w = history
    Job.objects.all().delete()
    flaky = _job(w, at=_at(w, 1), started_at=_at(w, 1), finished_at=_at(w, 3), retry_limit=1,
                 retries=1)  # fmt: skip
    JobPodFactory(job=flaky, gpus=8, started_at=_at(w, 1), finished_at=_at(w, 1.5),
                  phase="Failed", exit_code=3)  # fmt: skip
    JobPodFactory(job=flaky, gpus=8, started_at=_at(w, 1.5), finished_at=_at(w, 3),
                  phase="Succeeded", exit_code=0)  # fmt: skip
    # vision may hold 12 A100s (8 + 4 borrowed): an 8-GPU job behind it waits for the first.
    _job(w, at=_at(w, 2), started_at=_at(w, 3), finished_at=_at(w, 4))
    failed = _job(w, at=_at(w, 5), started_at=_at(w, 5), finished_at=_at(w, 6),
                  state=Job.State.FAILED)  # fmt: skip
    JobPodFactory(job=failed, gpus=8, started_at=_at(w, 5), finished_at=_at(w, 6),
                  phase="Failed", exit_code=1)  # fmt: skip
    _job(w, at=_at(w, 5.5), started_at=_at(w, 6), finished_at=_at(w, 7))
    result = whatif_compute(days=1, proposal={}, now=w["end"])
    vision = result["today"]["teams"][str(w["vision"].pk)]
    # Waits 0, 1 h, 0 and 30 min, as they happened (with only its longest pod, 1:30-3:00, the
    # second job would have waited 30 minutes; the failed job's pod counts too).
    assert (vision["wait_p50_seconds"], vision["wait_p90_seconds"]) == (900.0, 3060.0)
    assert (vision["actual_wait_p50_seconds"], vision["actual_wait_p90_seconds"]) == (900.0, 3060.0)
    assert vision["gpu_hours"] == 8 * (2 + 1 + 1 + 1)
    assert result["agreement"]["agrees"] and result["agreement"]["jobs_otherwise"] == 0


def test_a_job_cancelled_while_running_stops_when_it_was_cancelled(history):
    """Cancelled at 2:00 after an hour of its 5-hour run: in the replay too it stops then, even
    if it is preempted and started again before (it does not run its hour once more)."""
    w = history
    Job.objects.all().delete()
    _job(w, at=_at(w, 1), started_at=_at(w, 1), finished_at=_at(w, 2),
         state=Job.State.CANCELLED, expected_runtime_seconds=5 * HOUR)  # fmt: skip
    _job(w, at=_at(w, 1.5), started_at=_at(w, 2), finished_at=_at(w, 3))
    result = whatif_compute(days=1, proposal={}, now=w["end"])
    vision = result["today"]["teams"][str(w["vision"].pk)]
    assert vision["gpu_hours"] == 8 * (1 + 1)
    assert vision["wait_p90_seconds"] == pytest.approx(0.9 * 0.5 * HOUR)
    assert result["agreement"]["agrees"]


def test_the_wait_counts_from_the_submission_and_the_job_arrives_when_the_cluster_saw_it(history):
    """Submitted at 1:00 while the cluster could not be reached, created there at 1:20 and
    started at once: it waited 20 minutes as it happened, and in the replay it arrives at 1:20,
    not at 1:00 (where it would have started before a job created at 1:10)."""
    w = history
    Job.objects.all().delete()
    _job(w, at=_at(w, 1), queued_at=_at(w, 1 + 1 / 3), started_at=_at(w, 1 + 1 / 3),
         finished_at=_at(w, 3), gpus_per_worker=4)  # fmt: skip
    _job(w, at=_at(w, 1 + 1 / 6), queued_at=_at(w, 1 + 1 / 6), started_at=_at(w, 1 + 1 / 6),
         finished_at=_at(w, 4), workers=2, gpus_per_worker=4)  # fmt: skip
    result = whatif_compute(days=1, proposal={}, now=w["end"])
    vision = result["today"]["teams"][str(w["vision"].pk)]
    assert vision["wait_p90_seconds"] == pytest.approx(0.9 * 20 * 60)
    assert result["agreement"]["agrees"] and result["agreement"]["jobs_otherwise"] == 0


def test_a_job_preempted_before_the_window_waits_at_its_start_not_runs(history):
    """Two jobs carried over: one holds vision's 12 GPUs from the day before to 2:00; the other,
    started the day before and preempted before the window opened (its pod stopped), waits and
    runs from 2:00 to 4:00. At the window's start it waits its turn: it does not hold GPUs from
    0:00 (8 × 4 GPU-hours), only from 2:00; and the window's job waits for 2:00 as it did."""
    w = history
    Job.objects.all().delete()
    _job(w, at=_at(w, -4), started_at=_at(w, -3), finished_at=_at(w, 2), workers=3,
         gpus_per_worker=4)  # fmt: skip
    before = _job(w, at=_at(w, -5), started_at=_at(w, -4), finished_at=_at(w, 4))
    JobPodFactory(job=before, gpus=8, started_at=_at(w, -4), finished_at=_at(w, -3),
                  phase="Deleted")  # fmt: skip
    JobPodFactory(job=before, gpus=8, started_at=_at(w, 2), finished_at=_at(w, 4),
                  phase="Succeeded")  # fmt: skip
    _job(w, at=_at(w, 0.5), started_at=_at(w, 2), finished_at=_at(w, 3), gpus_per_worker=4)
    result = whatif_compute(days=1, proposal={}, now=w["end"])
    assert (result["jobs"], result["carried_over"]) == (1, 2)
    vision = result["today"]["teams"][str(w["vision"].pk)]
    assert vision["wait_p50_seconds"] == vision["actual_wait_p50_seconds"] == 1.5 * HOUR
    assert vision["gpu_hours"] == 12 * 2 + 8 * 2 + 4 * 1
    assert result["agreement"]["agrees"]


def test_where_the_replay_differs_from_the_history_the_page_says_why(history, client):
    """Vision's quota was cut from 12 to 8 GPUs during the window and its queue held for two
    hours: the recorded waits are not what today's configuration gives, and the page says so
    (by how much, the changes and the hold, the first job that went otherwise) instead of
    showing the recorded waits beside the replay."""
    w = history
    Job.objects.all().delete()
    for k in range(4):  # four 6-GPU jobs at 1:00, two at a time as the quota then allowed
        began = 1 + 2 * (k // 2)
        _job(w, at=_at(w, 1), started_at=_at(w, began), finished_at=_at(w, began + 2),
             gpus_per_worker=6)  # fmt: skip
    changed = AuditEvent.objects.create(verb="quota.change", object_type="quota",
                                        object_repr="Vision · a100", team=w["vision"])  # fmt: skip
    held = AuditEvent.objects.create(verb="team.queue_hold", object_type="team",
                                     object_repr="Vision", team=w["vision"])  # fmt: skip
    released = AuditEvent.objects.create(verb="team.queue_release", object_type="team",
                                         object_repr="Vision", team=w["vision"])  # fmt: skip
    for event, hours in ((changed, 5), (held, 6), (released, 8)):
        AuditEvent.objects.filter(pk=event.pk).update(created_at=_at(w, hours))
    w["vision"].quotas.filter(pool=w["a100"]).update(nominal_gpus=4, borrowing_limit=2)
    result = whatif_compute(days=1, proposal={}, now=w["end"])
    agreement = result["agreement"]
    assert not agreement["agrees"]
    assert agreement["worst"]["team"] == "Vision" and agreement["worst_percent"] > 10
    text = " ".join(agreement["reasons"])
    assert "The configuration changed during the window" in text and "Vision · a100" in text
    assert "Queues were held" in text and "Vision from" in text
    assert "started otherwise than recorded; the first" in text
    run = WhatIfRun.objects.create(name="as is", created_by=w["maria"], days=1, proposal={},
                                   state=WhatIfRun.State.DONE, result=result)  # fmt: skip
    client.force_login(w["maria"])
    page = client.get(reverse("quota-whatif-detail", args=[run.pk])).content.decode()
    assert 'id="whatif-agreement" data-agrees="false"' in page
    assert "The recorded history differs from what Kueue's rules give" in page
    assert "As it happened" not in page and "as-it-happened" not in page
    assert "Queues were held" in page
