"""Submission rules, approval policy, admissibility and the job state machine (no cluster)."""

from datetime import timedelta

import pytest
from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.utils import timezone

from fleet.models import Cluster, Node
from queues import tasks as job_tasks
from queues.forms.jobs import JobForm, form_initial_from_job
from queues.models import ApprovalPolicy, AuditEvent, Job, JobTransition, Membership, Quota
from queues.selectors import jobs as job_selectors
from queues.services.jobs import apply as job_apply
from queues.services.jobs import lifecycle
from queues.services.jobs import submit as svc
from queues.services.jobs.apply import jobs_reapply_lost
from tests.queues.builders import submit


def _errors(exc_info) -> dict:
    return {
        k: [str(m) for e in v for m in e.messages] for k, v in exc_info.value.error_dict.items()
    }


@pytest.mark.parametrize(
    "overrides,field",
    [
        ({"image": "not a valid image!"}, "image"),
        ({"image": "UPPER/case:1"}, "image"),
        ({"command": []}, "command"),
        ({"command": "python train.py"}, "command"),
        ({"command": ["python", 3]}, "command"),
        ({"workers": 0}, "workers"),
        ({"gpus_per_worker": -1}, "gpus_per_worker"),
        ({"max_runtime_seconds": 0}, "max_runtime_seconds"),
        ({"env": {"1BAD": "x"}}, "env"),
        ({"env": {"GOOD-NAME": "x"}}, "env"),
        ({"env": {f"V{i}": "x" for i in range(65)}}, "env"),
        ({"env": {"MASTER_ADDR": "x"}}, "env"),
        ({"args": ["x" * 40000]}, "command"),
        ({"name": ""}, "name"),
        ({"tier": "no-such-tier"}, "tier"),
        ({"pool": "h100"}, "pool"),
        ({"expected_runtime_seconds": 7200}, "expected_runtime_seconds"),
    ],
)
def test_bad_input_is_a_field_error(jw, overrides, field):
    with pytest.raises(ValidationError) as exc:
        submit(jw, **overrides)
    assert field in _errors(exc)
    assert not Job.objects.exists()


def test_valid_submission_derives_a_dns_name_and_is_submitted(
    jw, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks() as callbacks:
        job = submit(jw, name="My Big_Run!", tier=None, pool="any")
    assert job.state == Job.State.SUBMITTED and job.submitted_at
    assert job.k8s_name == f"my-big-run-{job.pk}"
    assert job.tier.name == "experiment"  # the default tier
    assert job.pool is None and job.cluster == jw["cluster"]
    assert len(callbacks) == 1  # the apply task, after commit
    assert list(job.transitions.values_list("from_state", "to_state")) == [("draft", "submitted")]


def test_a_burst_of_submissions_asks_the_worker_once_until_it_starts(
    jw, monkeypatch, django_capture_on_commit_callbacks
):
    sent, waits = [], []

    def apply_async(args, countdown=None):
        sent.extend(args)
        waits.append(countdown)

    monkeypatch.setattr(job_tasks.apply_jobs, "apply_async", apply_async)
    with django_capture_on_commit_callbacks(execute=True):
        for i in range(5):
            submit(jw, name=f"sweep {i}", gpus_per_worker=1)
    assert sent == [jw["cluster"].pk]
    # The message waits the gather window, so jobs submitted meanwhile join the same batch.
    assert waits == [settings.JOBS_APPLY_GATHER_SECONDS] and waits[0] > 0
    # The worker clears the request before it reads the jobs; the next submission asks again.
    Cluster.objects.filter(pk=jw["cluster"].pk).update(jobs_apply_requested_at=None)
    with django_capture_on_commit_callbacks(execute=True):
        submit(jw, name="after the drain started", gpus_per_worker=1)
    assert sent == [jw["cluster"].pk] * 2
    # A request whose message was lost is made again once it is stale.
    stale = timezone.now() - job_apply.APPLY_REQUEST_FRESH * 2
    Cluster.objects.filter(pk=jw["cluster"].pk).update(jobs_apply_requested_at=stale)
    assert job_apply.jobs_apply_request(cluster_id=jw["cluster"].pk) is True
    assert job_apply.jobs_apply_request(cluster_id=jw["cluster"].pk) is False
    assert sent == [jw["cluster"].pk] * 3


def test_submission_without_any_cluster_is_refused(world):
    from tests.queues.builders import make_tiers

    make_tiers()
    with pytest.raises(ValidationError) as exc:
        svc.job_submit(user=world["alice"], team=world["vision"], name="x",
                       image="ghcr.io/acme/train:1", command=["python"], workers=1,
                       gpus_per_worker=0, pool="any", max_runtime_seconds=60)  # fmt: skip
    assert "No cluster is registered" in _errors(exc)["pool"][0]
    assert not Job.objects.exists()


def test_only_members_submit(jw):
    with pytest.raises(PermissionDenied):
        submit(jw, user="carol", team="vision")
    # A team read with someone else's membership proves nothing about carol.
    alices = job_selectors.user_job_teams(user=jw["alice"]).get(slug="vision")
    with pytest.raises(PermissionDenied):
        svc.job_submit(user=jw["carol"], team=alices, name="x", image="ghcr.io/acme/train:1",
                       command=["python"], gpus_per_worker=1, pool="a100",
                       max_runtime_seconds=60)  # fmt: skip
    assert not Job.objects.exists()


def test_job_that_could_never_fit_is_refused_with_why(jw):
    # vision may use 8 + min(4, nlp's 4 lendable) = 12 A100s.
    with pytest.raises(ValidationError) as exc:
        submit(jw, workers=2, gpus_per_worker=8)
    message = " ".join(sum(_errors(exc).values(), []))
    assert "16 GPUs" in message and "at most 12 in a100" in message
    assert "8 quota + 4 it may borrow" in message
    # 12 fits.
    assert submit(jw, workers=3, gpus_per_worker=4).state == Job.State.SUBMITTED


def test_a_zero_quota_gives_no_access_even_where_other_teams_have_quota(jw):
    # nlp holds an empty quota row in l4, where vision has 4 GPUs: that row grants nothing.
    Quota.objects.create(team=jw["nlp"], pool=jw["pools"]["l4"], nominal_gpus=0,
                         borrowing_limit=0)  # fmt: skip
    assert [p.name for p in job_selectors.team_job_pools(team=jw["nlp"])] == ["a100"]
    with pytest.raises(ValidationError) as exc:
        submit(jw, user="carol", team="nlp", pool="l4", gpus_per_worker=1)
    assert "no quota in a pool named 'l4'" in _errors(exc)["pool"][0]


@pytest.mark.parametrize("nominal", [0, 4])
@pytest.mark.parametrize("borrowing", [None, 0, 2])
def test_the_quota_rule_reads_the_same_in_sql_and_on_a_row(jw, nominal, borrowing):
    quota = Quota.objects.create(team=jw["nlp"], pool=jw["pools"]["l4"], nominal_gpus=nominal,
                                 borrowing_limit=borrowing)  # fmt: skip
    in_sql = Quota.objects.filter(Quota.GRANTS_GPUS, pk=quota.pk).exists()
    assert quota.grants_gpus() is in_sql
    assert in_sql is (nominal > 0 or borrowing != 0)


def test_more_gpus_per_worker_than_any_node_is_refused(jw):
    Node.objects.create(cluster=jw["cluster"], name="n1", pool=jw["pools"]["a100"],
                        gpu_capacity=8, gpu_allocatable=8)  # fmt: skip
    with pytest.raises(ValidationError) as exc:
        submit(jw, workers=1, gpus_per_worker=10)
    assert "largest node in a100 has 8" in _errors(exc)["gpus_per_worker"][0]


def test_approval_policy_holds_big_jobs_and_only_a_lead_approves(jw):
    policy = ApprovalPolicy.objects.create(max_gpus_without_approval=4)
    policy.tiers_needing_approval.add(jw["tiers"]["production"])
    small = submit(jw, gpus_per_worker=2)
    assert small.state == Job.State.SUBMITTED
    big = submit(jw, workers=2, gpus_per_worker=4)
    assert big.state == Job.State.PENDING_APPROVAL
    assert "8 GPUs is more than 4" in big.pending_reason
    prod = submit(jw, tier="production")
    assert prod.state == Job.State.PENDING_APPROVAL
    with pytest.raises(PermissionDenied):
        svc.job_approve(job=big, approver=jw["alice"])
    with pytest.raises(PermissionDenied):
        svc.job_approve(job=big, approver=jw["maria"])
    approved = svc.job_approve(job=big, approver=jw["bob"])
    assert approved.state == Job.State.SUBMITTED and approved.approved_by == jw["bob"]
    assert AuditEvent.objects.filter(verb="job.approve", object_id=str(big.pk)).exists()
    rejected = svc.job_reject(job=prod, approver=jw["bob"], reason="not now")
    assert rejected.state == Job.State.REJECTED and "not now" in rejected.exit_reason
    # Approving twice is a clean error, not a second submission.
    with pytest.raises(ValidationError):
        svc.job_approve(job=rejected, approver=jw["bob"])


def test_state_machine_stamps_and_records_and_refuses_going_back(jw):
    job = submit(jw)
    lifecycle.job_transition(job_id=job.pk, to_state="queued")
    lifecycle.job_transition(job_id=job.pk, to_state="running")
    assert lifecycle.job_transition(job_id=job.pk, to_state="running") is False  # no-op
    lifecycle.job_transition(job_id=job.pk, to_state="succeeded")
    job.refresh_from_db()
    assert job.queued_at and job.started_at and job.finished_at
    assert job.queued_at <= job.started_at <= job.finished_at
    with pytest.raises(lifecycle.TransitionError):
        lifecycle.job_transition(job_id=job.pk, to_state="running")
    assert JobTransition.objects.filter(job=job).count() == 4
    # A lost race (the job left the expected state) is a no-op, not an error.
    assert (
        lifecycle.job_transition(job_id=job.pk, to_state="failed", from_states=("running",))
        is False
    )


def test_cancel_rules(jw):
    job = submit(jw)
    with pytest.raises(PermissionDenied):
        lifecycle.job_cancel(job=job, user=jw["carol"])
    cancelled = lifecycle.job_cancel(job=job, user=jw["bob"])  # a lead may cancel
    assert cancelled.state == Job.State.CANCELLED
    with pytest.raises(ValidationError):
        lifecycle.job_cancel(job=job, user=jw["alice"])


def test_resubmit_copies_the_spec(jw):
    first = submit(jw, env={"LR": "0.1"}, args=["--x"])
    again = svc.job_resubmit(job=first, user=jw["bob"])
    assert again.pk != first.pk and again.resubmitted_from == first
    assert (again.env, again.args, again.pool, again.owner) == (
        {"LR": "0.1"}, ["--x"], first.pool, jw["bob"],
    )  # fmt: skip


def test_lost_applies_are_found_again_after_a_while(jw):
    fresh = submit(jw, name="fresh")
    old = submit(jw, name="old")
    Job.objects.filter(pk=old.pk).update(submitted_at=timezone.now() - timedelta(minutes=5))
    applied = submit(jw, name="applied")
    Job.objects.filter(pk=applied.pk).update(
        submitted_at=timezone.now() - timedelta(minutes=5), applied_generation=1
    )
    assert jobs_reapply_lost() == {jw["cluster"].pk: [old.pk]}
    # A job another worker claimed a moment ago is theirs; a claim from long ago is void.
    Job.objects.filter(pk=old.pk).update(apply_claimed_at=timezone.now())
    assert jobs_reapply_lost() == {}
    Job.objects.filter(pk=old.pk).update(apply_claimed_at=timezone.now() - timedelta(hours=1))
    assert jobs_reapply_lost() == {jw["cluster"].pk: [old.pk]}
    assert fresh.pk not in jobs_reapply_lost()[jw["cluster"].pk]


def test_why_pending_counts_own_and_department_gpus_in_use(jw):
    # vision runs 6 of its 8 A100s; nlp (same department) runs 3 of the 4 it lends;
    # recsys (other department) runs 4, which must not count.
    def running(user, team, workers, gpus):
        job = submit(jw, user=user, team=team, workers=workers, gpus_per_worker=gpus)
        Job.objects.filter(pk=job.pk).update(state="running", admitted_pool=jw["pools"]["a100"])

    running("alice", "vision", 3, 2)
    running("carol", "nlp", 1, 3)
    Membership.objects.create(user=jw["carol"], team=jw["recsys"], role="member")
    running("carol", "recsys", 2, 2)
    waiting = submit(jw, workers=2, gpus_per_worker=2)
    assert job_selectors.team_pool_usage(team=jw["vision"]) == {jw["pools"]["a100"].pk: 6}
    text = job_selectors.pending_reason_text(job=waiting, message="")
    assert "your team's quota is 8 (6 in use)" in text
    assert "the department has 1 idle to lend" in text
    assert "Only 3 of the 4 it needs are free now." in text


def test_why_pending_counts_what_the_team_borrows_already(jw):
    # vision (8 quota, may borrow 4) runs 11: it borrows 3 of nlp's 4 idle, so 1 is left to it.
    job = submit(jw, workers=1, gpus_per_worker=11)
    Job.objects.filter(pk=job.pk).update(state="running", admitted_pool=jw["pools"]["a100"])
    waiting = submit(jw, workers=1, gpus_per_worker=2)
    text = job_selectors.pending_reason_text(job=waiting, message="")
    assert "your team's quota is 8 (11 in use) and the department has 4 idle to lend" in text
    assert "your team already borrows 3 of at most 4" in text
    assert "Only 1 of the 2 it needs are free now." in text


def test_resubmit_form_starts_from_the_earlier_jobs_spec(jw):
    jw["cluster"].scheduler = "volcano"  # where gang can be off
    jw["cluster"].save()
    first = submit(
        jw, name="sweep", command=["python", "train.py"], args=["--lr", "0.1 0.2"],
        env={"SEED": "7", "MODE": "a=b"}, workers=2, gang=False, tier="development",
    )  # fmt: skip
    initial = form_initial_from_job(first)
    form = JobForm(data=initial, user=jw["alice"])
    assert form.is_valid(), form.errors
    assert form.team == jw["vision"]
    assert form.submission() == {**svc.job_spec(first), "pool": "a100", "tier": "development"}


def test_gang_is_always_on_for_kueue(jw):
    """Kueue admits a job whole: the form does not offer gang, and the API refuses it off."""
    assert "gang" not in JobForm(user=jw["alice"]).fields
    with pytest.raises(ValidationError) as caught:
        submit(jw, workers=2, gang=False)
    assert "all workers always start together" in caught.value.message_dict["gang"][0]
    assert submit(jw, workers=2).gang is True


def test_start_estimates_count_returned_gpus_up_to_the_teams_ceiling(jw):
    # vision's ceiling in a100 is 12 (8 quota + 4 it may borrow from nlp).
    now = timezone.now()

    def running(user, team, gpus, ends_in):
        job = submit(jw, user=user, team=team, gpus_per_worker=gpus, max_runtime_seconds=9000,
                     expected_runtime_seconds=1000)  # fmt: skip
        started = now + timedelta(seconds=ends_in - 1000)
        Job.objects.filter(pk=job.pk).update(state=Job.State.RUNNING, started_at=started)

    running("alice", "vision", 8, ends_in=300)
    running("alice", "vision", 4, ends_in=600)
    running("carol", "nlp", 4, ends_in=100)
    estimate = job_selectors.start_estimator(team=jw["vision"], pools=[jw["pools"]["a100"]],
                                             now=now)  # fmt: skip
    # vision holds 12, its ceiling: nothing is free now. nlp's 4 come back at +100, but vision
    # may not borrow more than its 4; its own 8 come back at +300 (8 free for it), its last 4 at
    # +600 (12).
    assert estimate(gpus=4)[0] == now + timedelta(seconds=300)
    assert estimate(gpus=8)[0] == now + timedelta(seconds=300)
    start, basis = estimate(gpus=4, ahead=8)
    assert start == now + timedelta(seconds=600)
    assert "this job's 4 and 8 ahead of it" in basis and "3 running job(s) in a100" in basis
    start, basis = estimate(gpus=8, ahead=8)
    assert start is None and "16 GPUs do not fit in your team's ceiling of 12" in basis


def _running(jw, team, gpus, *, now, ends_in):
    user = "alice" if team == "vision" else "carol"
    job = submit(jw, user=user, team=team, gpus_per_worker=gpus, expected_runtime_seconds=1000)
    started = now + timedelta(seconds=ends_in - 1000)
    Job.objects.filter(pk=job.pk).update(state=Job.State.RUNNING, started_at=started)


def test_start_estimates_borrow_only_what_the_lenders_leave_idle(jw):
    """vision's ceiling in a100 is 12, but 4 of them are nlp's quota, which nlp uses until
    +200: 8 GPUs start now, 12 only then."""
    now = timezone.now()
    _running(jw, "nlp", 4, now=now, ends_in=200)
    estimate = job_selectors.start_estimator(team=jw["vision"], pools=[jw["pools"]["a100"]],
                                             now=now)  # fmt: skip
    start, basis = estimate(gpus=8)
    assert start == now and "8 GPUs of your team's ceiling (12) look free" in basis
    start, basis = estimate(gpus=12)
    assert start == now + timedelta(seconds=200) and "1 running job(s) in a100" in basis


def test_a_team_whose_quota_others_borrow_starts_at_once_as_kueue_takes_it_back(jw):
    """vision borrows all of nlp's 4 GPUs: nothing is free for nlp, but its job reclaims them."""
    now = timezone.now()
    _running(jw, "vision", 12, now=now, ends_in=5000)
    estimate = job_selectors.start_estimator(team=jw["nlp"], pools=[jw["pools"]["a100"]],
                                             now=now)  # fmt: skip
    start, basis = estimate(gpus=4)
    assert start == now
    assert "Only 0 GPUs look free, but other teams borrow your team's quota" in basis
    start, basis = estimate(gpus=4, ahead=4)  # nlp may not borrow: 8 never fit
    assert start is None and "8 GPUs do not fit in your team's ceiling of 4" in basis


def test_a_waiting_job_whose_move_to_queued_lost_a_race_is_still_explained(jw):
    from queues.services.jobs.sync import _explain_waiting

    job = submit(jw, gpus_per_worker=8)
    job.state = Job.State.RUNNING  # what the sync read; its move to queued found it changed
    _explain_waiting([(job, "", {"queue_position": 1, "workload_name": "wl"})], [job],
                     timezone.now())  # fmt: skip
    job.refresh_from_db()
    assert job.queue_position == 1 and job.workload_name == "wl"
    assert job.pending_reason.startswith("Waiting for 8 A100-SXM4-80GB GPUs")
    assert job.estimate_basis
