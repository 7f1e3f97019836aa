"""Queue position and start estimate on Volcano: Volcano's order within a queue (priority, then
creation time, then uid) over the PodGroups, and its enqueue rule played forward in time; then the
whole path against kubesim's Volcano, the API and the job page."""

from django.urls import reverse

from queues.models import Job
from queues.selectors.volcano_queue import first_fit, queue_places
from queues.services.jobs.apply import job_apply
from queues.services.jobs.sync import jobs_sync_cluster
from queues.tasks import sync_jobs
from tests.queues.builders import submit, sync_until, volcano_cluster, volcano_queue_full

VCJOB = "batch.volcano.sh/v1alpha1"


def _pg(
    job, *, queue="q1", created="2026-11-27T10:00:00Z", uid="u", gpus=4, prio="", phase="Pending"
):
    spec = {
        "queue": queue,
        "minMember": 1,
        "minResources": {"nvidia.com/gpu": str(gpus), "cpu": "2"},
    }
    if prio:
        spec["priorityClassName"] = prio
    return {
        "metadata": {
            "name": f"{job}-{uid}", "namespace": "team-a", "uid": uid, "creationTimestamp": created,
            "ownerReferences": [{"apiVersion": VCJOB, "kind": "Job", "name": job}],
        },
        "spec": spec,
        "status": {"phase": phase},
    }  # fmt: skip


def test_positions_follow_priority_then_creation_then_uid_and_count_the_gpus_ahead():
    priorities = {"high": 1000, "low": 10}
    pgs = [
        _pg("low-early", created="2026-11-27T10:00:00Z", uid="a", gpus=8, prio="low"),
        _pg("high-late", created="2026-11-27T10:00:05Z", uid="b", gpus=2, prio="high"),
        _pg("high-early", created="2026-11-27T10:00:01Z", uid="c", gpus=4, prio="high"),
        # Same priority and creation time as high-late: the smaller uid goes first.
        _pg("high-late-twin", created="2026-11-27T10:00:05Z", uid="a0", gpus=1, prio="high"),
        # No class found counts 0: after every classed job.
        _pg("none", created="2026-11-27T09:00:00Z", uid="d", gpus=3),
        # Enqueued or running PodGroups no longer wait: no place, and nothing ahead from them.
        _pg("running", created="2026-11-27T08:00:00Z", uid="e", gpus=6, phase="Running"),
        _pg("inqueue", created="2026-11-27T08:00:00Z", uid="f", gpus=6, phase="Inqueue"),
        # Another queue is counted on its own.
        _pg("other", queue="q2", created="2026-11-27T11:00:00Z", uid="g", gpus=5),
    ]
    places = {name: (p.queue, p.position, p.gpus_ahead) for (_, name), p in
              queue_places(pgs, priorities).items()}  # fmt: skip
    assert places == {
        "high-early": ("q1", 1, 0),
        "high-late-twin": ("q1", 2, 4),
        "high-late": ("q1", 3, 5),
        "low-early": ("q1", 4, 7),
        "none": ("q1", 5, 15),
        "other": ("q2", 1, 0),
    }


def test_first_fit_waits_for_the_queue_capability_and_the_pool_hand_worked():
    # Queue capability 8, holding 8 until 600 s; the pool (16) also holds 4 of others until 300 s.
    queue, pool = [(8, 600)], [(8, 600), (4, 300)]
    kw = {"ceiling": 8, "capacity": 16, "queue_holding": queue, "pool_holding": pool}
    assert first_fit(need=4, **kw) == 600  # the queue is full until its own job ends
    assert first_fit(need=8, **kw) == 600
    assert first_fit(need=12, **kw) is None  # more than the capability, ever
    # No capability set: only the pool bounds it. 14 of 16 held now; 8 from 300 s; 0 from 600 s.
    kw = {"ceiling": None, "capacity": 16, "queue_holding": [],
          "pool_holding": [(8, 600), (6, 300)]}  # fmt: skip
    assert first_fit(need=2, **kw) == 0
    assert first_fit(need=4, **kw) == 300
    assert first_fit(need=9, **kw) == 600
    assert first_fit(need=17, **kw) is None


def test_three_jobs_waiting_in_a_full_volcano_queue_get_positions_and_estimates(sim_jobs):
    cluster, short, long, (w1, w2, w3) = volcano_queue_full(sim_jobs)
    assert [j.state for j in (w1, w2, w3)] == [Job.State.QUEUED] * 3
    assert [j.queue_position for j in (w1, w2, w3)] == [1, 2, 3]
    # w1 needs 4: 6 + 4 fit in 12 once the short job ends. w2 waits for w1's 4 too (8 in all)
    # and w3 for 12: both only once the long job has ended as well.
    ends = {short.pk: short.started_at, long.pk: long.started_at}
    assert abs((w1.estimated_start - ends[short.pk]).total_seconds() - 300) <= 1
    assert abs((w2.estimated_start - ends[long.pk]).total_seconds() - 600) <= 1
    assert abs((w3.estimated_start - ends[long.pk]).total_seconds() - 600) <= 1
    assert "Volcano's queue order" in w2.estimate_basis
    assert "(this job's 4 and 4 ahead of it)" in w2.estimate_basis
    assert "capability in a100 of 12" in w3.estimate_basis
    # The short job ends, w1 is enqueued and starts: the others move up.
    sim_jobs["sim"].sim.clock.advance(295)  # simulated time, to just before the short job ends
    w1 = sync_until(w1, Job.State.RUNNING)
    assert Job.objects.get(pk=short.pk).state == Job.State.SUCCEEDED
    assert w1.state == Job.State.RUNNING and w1.queue_position is None
    sync_jobs()  # the workers' periodic sync (what their role must let them read)
    w2.refresh_from_db()
    w3.refresh_from_db()
    assert (w2.queue_position, w3.queue_position) == (1, 2)
    assert w2.state == w3.state == Job.State.QUEUED


def test_a_job_larger_than_its_volcano_queue_says_why_there_is_no_estimate(sim_jobs):
    from queues.models import Quota
    from queues.services.reconcile import cluster_reconcile

    cluster = volcano_cluster(sim_jobs)
    running = submit(sim_jobs, name="big", workers=2, gpus_per_worker=6)
    job_apply(job_id=running.pk)
    assert sync_until(running, Job.State.RUNNING).state == Job.State.RUNNING
    job = submit(sim_jobs, name="next", workers=2, gpus_per_worker=6)
    job_apply(job_id=job.pk)
    # The team's borrowing is taken away meanwhile: its a100 queue's capability is 8 now.
    Quota.objects.filter(team=sim_jobs["vision"], pool=sim_jobs["pools"]["a100"]).update(
        borrowing_limit=0
    )
    cluster_reconcile(cluster_id=cluster.pk)
    jobs_sync_cluster(cluster=cluster)
    job.refresh_from_db()
    assert job.state == Job.State.QUEUED and job.queue_position == 1
    assert job.estimated_start is None
    assert job.estimate_basis == (
        "No estimate: even when every running job has ended, 12 GPUs do not fit in your team's "
        "queue capability in a100 of 8 until capacity is freed or quota grows."
    )


def test_the_api_and_the_job_page_show_a_volcano_jobs_position_and_estimate(
    sim_jobs, api_as, client
):
    _, short, _, (w1, w2, _) = volcano_queue_full(sim_jobs)
    body = api_as(sim_jobs["alice"]).get(reverse("api-job-detail", args=[w2.pk])).json()
    assert body["queue_position"] == 2
    assert body["estimated_start"] is not None
    assert body["estimate_basis"] == w2.estimate_basis
    # Another team's member sees nothing of it.
    assert api_as(sim_jobs["carol"]).get(reverse("api-job-detail", args=[w2.pk])).status_code == 404
    client.force_login(sim_jobs["alice"])
    page = client.get(reverse("job-detail", args=[w1.pk])).content.decode()
    assert (
        "Position <strong>1</strong> in the team's queue (from Volcano's queue order: priority, "
        "then submission time)." in page
    )
    assert "Estimated start:" in page
