"""The demo as `make run` starts it (issue #34), seeded once against two real kubesims.

Every feature can be tried: a MIG pool, a time-sliced pool and a spot pool whose nodes are
taken back now and then, each priced; a second cluster on Volcano, registered and synced; a demo
command that fails with the exit code it names; budgets that start part spent and no queue held.

Its history is one the demo cluster could have made: Kueue's rules over today's configuration
made it, so no GPU is held twice, no team holds more than its quota and what it may borrow, no
pool more than it has; it has what real histories have (failures and retries, cancellations,
preemptions, checkpointed jobs that resumed); and the what-if's replay of today's configuration
gives it back."""

from __future__ import annotations

import io
import re
import time
from collections import defaultdict
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from billing.models import Budget
from billing.periods import month_start
from billing.selectors.usage import team_spend
from billing.services.budgets import budget_check
from demo.fleet import NODES
from demo.history import DEMAND, HISTORY_KEY
from fleet.models import GpuPrice, Node, NodePool
from kubesim import resources
from kubesim.testing import running_kubesim
from planning.services.whatif import whatif_compute
from queues.manifests.quotas import cluster_queue_name, volcano_pool_queue_name
from queues.models import Job, JobPod, ManagedObject, Quota, Team
from queues.services.jobs.apply import job_apply
from tests.demo.conftest import DEMO_FLEET
from tests.fixtures_cluster import CRDS_DIR
from tests.queues.builders import submit, sync_until

pytestmark = pytest.mark.django_db


def _history():
    return Job.objects.filter(idempotency_key__startswith=HISTORY_KEY)


def _peak(intervals) -> int:
    """The most held at once of [(start, end, amount)] (an end frees before a start at the
    same instant)."""
    events = sorted([(a, 1, n) for a, b, n in intervals] + [(b, 0, -n) for a, b, n in intervals])
    held = peak = 0
    for _, _, n in events:
        held += n
        peak = max(peak, held)
    return peak


def test_no_gpu_is_held_twice_and_no_pool_holds_more_than_it_has(seeded_demo):
    by_gpu = defaultdict(list)
    by_pool = defaultdict(list)
    pods = JobPod.objects.filter(job__in=_history()).select_related("job__pool")
    for pod in pods:
        assert pod.started_at < pod.finished_at and len(pod.gpu_uuids) == pod.gpus
        assert pod.node_name.startswith(f"{pod.job.pool.name}-node-")
        for uuid in pod.gpu_uuids:
            by_gpu[uuid].append((pod.started_at, pod.finished_at, 1))
        by_pool[pod.job.pool.name].append((pod.started_at, pod.finished_at, pod.gpus))
    assert len(by_gpu) > 50
    assert all(_peak(spans) == 1 for spans in by_gpu.values())
    for pool, spans in by_pool.items():
        nodes, per_node = NODES[pool]
        assert _peak(spans) <= nodes * per_node, pool


def test_no_team_holds_more_than_its_quota_and_what_it_may_borrow(seeded_demo):
    """From admission to end (its pods' stretches), per team and pool: at most nominal +
    borrowing limit; and each department's teams together at most their nominal quotas."""
    limits = {(q.team_id, q.pool_id): q.nominal_gpus + (q.borrowing_limit or 0)
              for q in Quota.objects.all()}  # fmt: skip
    cohort = defaultdict(int)
    for q in Quota.objects.select_related("team"):
        cohort[(q.team.department_id, q.pool_id)] += q.nominal_gpus
    held, by_department = defaultdict(list), defaultdict(list)
    for pod in JobPod.objects.filter(job__in=_history()).select_related("job__team"):
        span = (pod.started_at, pod.finished_at, pod.gpus)
        held[(pod.job.team_id, pod.job.pool_id)].append(span)
        by_department[(pod.job.team.department_id, pod.job.pool_id)].append(span)
    assert held
    for key, spans in held.items():
        assert _peak(spans) <= limits[key], key
    for key, spans in by_department.items():
        assert _peak(spans) <= cohort[key], key


def test_the_history_has_what_real_histories_have(seeded_demo):
    jobs = _history()
    states = {s: jobs.filter(state=s).count() for s in ("succeeded", "failed", "cancelled")}
    assert states["succeeded"] > 1000 and states["failed"] > 50 and states["cancelled"] > 10
    assert jobs.count() == seeded_demo["history"]["jobs"] == sum(states.values())
    # Failures with their exit code; some cured by a retry, some failing every attempt.
    failed = JobPod.objects.filter(job__in=jobs, phase="Failed")
    assert failed.exclude(exit_code=0).count() == failed.count() > 50
    assert jobs.filter(state="succeeded", retries__gt=0).exists()
    assert jobs.filter(state="failed", retries__gt=0, retry_limit__gt=0).exists()
    failing = jobs.filter(state="failed").first()
    assert "exited with code" in failing.exit_reason
    # Preemptions: the stopped run's pods Deleted, the job queued again and run to the end; a
    # checkpointed one resumed.
    preempted = jobs.filter(transitions__to_state="preempted").distinct()
    assert preempted.count() > 50
    # Counted as the status sync counts Kueue's evictions (a job page shows the count).
    assert list(jobs.filter(preemptions__gt=0).order_by("pk")) == list(preempted.order_by("pk"))
    assert all(job.preemptions == job.transitions.filter(to_state="preempted").count()
               for job in preempted[:100])  # fmt: skip
    resumed = preempted.filter(state="succeeded").exclude(checkpoint_volume="").first()
    assert resumed is not None and resumed.pods.filter(phase="Deleted").exists()
    # Cancelled while waiting (never started) and while running.
    cancelled = jobs.filter(state="cancelled")
    assert cancelled.filter(started_at__isnull=True).exists()
    assert cancelled.filter(started_at__isnull=False).exists()
    # Every timeline is in order and ends with the job's state; the history has ended by now.
    now = timezone.now()
    for job in jobs.order_by("?")[:200]:
        times = [t.at for t in job.transitions.all()]
        assert times == sorted(times) and job.transitions.last().to_state == job.state
        assert job.submitted_at < job.queued_at <= (job.started_at or job.finished_at)
        assert job.finished_at <= now and job.k8s_name.endswith(f"-{job.pk}")
        pods = list(job.pods.all())
        assert all(p.node_name for p in pods) and all(p.finished_at <= job.finished_at
                                                      for p in pods)  # fmt: skip
    # It covers last month and this month up to the last few hours.
    assert jobs.order_by("submitted_at").first().submitted_at < (
        now.replace(day=1) - timedelta(days=20)
    )


def test_the_what_if_of_todays_configuration_gives_the_history_back(seeded_demo):
    """The issue's target: on the demo's own history, per team, the replayed median and p90
    wait within 10 % of what happened (or a minute); the run says it agrees."""
    result = whatif_compute(days=30, proposal={})
    assert result["today"]["fair_sharing"]  # as the demo cluster runs (its queues report shares)
    agreement = result["agreement"]
    assert agreement["agrees"], agreement["reasons"]
    # Job by job too, but for a few: nlp shares its queue among members, and the usage Kueue
    # remembered for each member when the window opened is estimated (Kueue sampled it when its
    # controller ran), so two members near a tie may go in the other order, and what follows
    # them in the department's cohort with them (2 to 44 of some 3,100 jobs as measured,
    # depending on where the window opens).
    assert sum(agreement["otherwise_by_team"].values()) == agreement["jobs_otherwise"]
    assert agreement["jobs_otherwise"] <= 0.02 * result["jobs"], agreement["otherwise_by_team"]
    for team_id, row in result["today"]["teams"].items():
        if not row["jobs"]:
            continue
        for q in ("p50", "p90"):
            replayed, recorded = row[f"wait_{q}_seconds"], row[f"actual_wait_{q}_seconds"]
            assert abs(replayed - recorded) <= max(60, 0.1 * recorded), (team_id, q)
    # The waits are not all nothing: some teams queue (the question a what-if answers).
    assert max(row["actual_wait_p90_seconds"] or 0 for row in result["today"]["teams"].values()
               if row["jobs"]) > 1800  # fmt: skip


def test_whatif_agreement_prints_each_teams_waits_and_fails_when_they_differ(seeded_demo):
    """`manage.py whatif_agreement` shows the figures the page judges: per team with jobs, the
    replayed / recorded p50 and p90 and whether they agree; with a team's quota cut after
    the fact (today's configuration no longer the history's), it says they differ and exits 1."""
    out = io.StringIO()
    call_command("whatif_agreement", "--days", "30", stdout=out)
    lines = out.getvalue().splitlines()
    header, *rows = [re.split(r"\s{2,}", line) for line in lines[:6]]
    assert header == ["team", "jobs", "p50 replayed / recorded", "p90 replayed / recorded",
                      "agrees", "started otherwise"]  # fmt: skip
    history = Job.objects.filter(idempotency_key__startswith=HISTORY_KEY,
                                 submitted_at__gte=timezone.now() - timedelta(days=30))  # fmt: skip
    busy = list(Team.objects.filter(slug__in=DEMAND, jobs__in=history).distinct().order_by("name"))
    assert [row[0] for row in rows] == [t.name for t in busy]
    assert all(row[4] == "yes" for row in rows)
    assert "The replay gives back what happened." in lines[-1]

    team = busy[0]
    Quota.objects.filter(team=team).update(nominal_gpus=1, borrowing_limit=0)
    out = io.StringIO()
    with pytest.raises(CommandError, match="differs from the history"):
        call_command("whatif_agreement", stdout=out)
    row = next(re.split(r"\s{2,}", line) for line in out.getvalue().splitlines()
               if line.startswith(f"{team.name}  "))  # fmt: skip
    assert row[4] == "no"


# -- every feature in the first hour ---------------------------------------------------------


def _pool(cluster, name):
    return NodePool.objects.get(cluster=cluster, name=name)


def _price(model, profile):
    return GpuPrice.objects.get(gpu_model__name=model, mig_profile=profile, effective_to=None)


def test_a_mig_pool_counts_instances_and_prices_its_profile(seeded_demo):
    pool = _pool(seeded_demo["cluster"], "a100-mig")
    assert (pool.sharing, pool.mig_profile, pool.gpu_resource) == (
        "mig", "1g.10gb", "nvidia.com/mig-1g.10gb")  # fmt: skip
    assert sum(pool.nodes.values_list("gpu_capacity", flat=True)) == 56
    vision = Team.objects.get(slug="vision")
    live = seeded_demo["sim"].store.get(*_cq(vision))
    flavors = {f["name"]: f for g in live["spec"]["resourceGroups"] for f in g["flavors"]}
    quota = {r["name"]: r["nominalQuota"] for r in flavors["a100-mig"]["resources"]}
    assert quota["nvidia.com/mig-1g.10gb"] == 14
    assert _price("A100-SXM4-80GB", "1g.10gb").price_per_hour < _price(
        "A100-SXM4-80GB", "").price_per_hour  # fmt: skip


def _cq(team):
    return resources.CLUSTER_QUEUES, None, cluster_queue_name(team)


def test_a_time_sliced_pool_counts_shares_and_prices_a_slice(seeded_demo):
    pool = _pool(seeded_demo["cluster"], "l4-shared")
    assert pool.sharing == "time-slicing"
    (node,) = pool.nodes.all()
    assert node.gpu_capacity == 16 and node.labels["nvidia.com/gpu.replicas"] == "4"
    assert Quota.objects.get(team__slug="speech", pool=pool).nominal_gpus == 8
    assert _price("L4", "time-slice 1/4").price_per_hour * 4 == _price("L4", "").price_per_hour


def test_a_spot_pool_takes_interruptible_jobs_and_its_nodes_are_taken_back_now_and_then(
    seeded_demo,
):
    pool = _pool(seeded_demo["cluster"], "l4-spot")
    assert pool.capacity_type == "spot" and pool.nodes.count() == 2
    assert any(t["key"] == "cloud.google.com/gke-spot" for t in pool.taints)
    assert _price("L4", "spot").price_per_hour < _price("L4", "").price_per_hour
    # The demo fleet file reclaims each spot node about every half hour: at 600 simulated
    # seconds a second, a node gets its notice within seconds, and is back after a while.
    with running_kubesim(fleet=DEMO_FLEET, crds_dir=CRDS_DIR, time_scale=600) as sim:

        def noticed():
            nodes = sim.store.list(resources.NODES, label_selector="kubesim.dev/pool=l4-spot")
            return [n["metadata"]["name"] for n in nodes
                    if any(c["type"] == "TerminationNotice" and c["status"] == "True"
                           for c in n["status"].get("conditions") or [])]  # fmt: skip

        deadline = time.monotonic() + 30
        while not noticed():
            assert time.monotonic() < deadline, "no spot node was taken back"
            time.sleep(0.2)
        others = sim.store.list(resources.NODES, label_selector="kubesim.dev/pool=a100")
        assert all(not any(c["type"] == "TerminationNotice" for c in n["status"]["conditions"])
                   for n in others)  # fmt: skip


def test_the_second_cluster_is_registered_synced_and_runs_volcano_jobs(seeded_demo):
    lab = seeded_demo["lab"]
    lab.refresh_from_db()
    assert lab.scheduler == "volcano" and lab.last_sync_error == "" and lab.last_sync_at
    assert Node.objects.filter(cluster=lab).count() == 2
    assert not ManagedObject.objects.filter(cluster=lab).exclude(last_error="").exists()
    vision = Team.objects.get(slug="vision")
    pool = _pool(lab, "l40s")
    queues = seeded_demo["lab_sim"].store.list(resources.VOLCANO_QUEUES)
    names = {q["metadata"]["name"] for q in queues}
    assert {cluster_queue_name(vision), volcano_pool_queue_name(vision, pool)} <= names
    # A job on it runs through Volcano to the end.
    world = {"alice": vision.memberships.get(user__username="alice").user, "vision": vision}
    job = submit(world, name="on the lab", pool="l40s", gpus_per_worker=1,
                 expected_runtime_seconds=2)  # fmt: skip
    assert job.cluster == lab
    assert job_apply(job_id=job.pk) == "applied"
    assert sync_until(job, Job.State.SUCCEEDED, timeout=30).state == Job.State.SUCCEEDED


def test_a_job_waiting_on_the_lab_shows_its_volcano_queue_position_and_estimate(seeded_demo):
    """vision's l40s queue on the lab (capability 4 + 4 = 8, the pool's 8 GPUs) full with two
    4-GPU jobs of vision: the next two wait at positions 1 and 2, the first until one of them
    ends, the second until both have."""
    from queues.services.jobs.apply import job_delete_objects
    from queues.services.jobs.lifecycle import job_cancel
    from queues.services.jobs.sync import jobs_sync_cluster

    lab, sim = seeded_demo["lab"], seeded_demo["lab_sim"]
    vision = Team.objects.get(slug="vision")
    world = {"alice": vision.memberships.get(user__username="alice").user, "vision": vision}
    jobs = []
    try:
        for name in ("lab one", "lab two"):
            job = submit(world, name=name, pool="l40s", gpus_per_worker=4,
                         expected_runtime_seconds=600)  # fmt: skip
            job_apply(job_id=job.pk)
            jobs.append(sync_until(job, Job.State.RUNNING, timeout=30))
        assert [j.state for j in jobs] == [Job.State.RUNNING] * 2
        ends = sorted(j.started_at + timedelta(seconds=600) for j in jobs)
        waiting = []
        for name in ("lab next", "lab after"):
            # PodGroups created apart (Volcano orders by their creation, to the second).
            sim.clock.advance(2)
            job = submit(world, name=name, pool="l40s", gpus_per_worker=4)
            job_apply(job_id=job.pk)
            sim.settle()
            waiting.append(job)
        jobs += waiting
        jobs_sync_cluster(cluster=lab)
        for job in waiting:
            job.refresh_from_db()
        assert [j.state for j in waiting] == [Job.State.QUEUED] * 2
        assert [j.queue_position for j in waiting] == [1, 2]
        for job, end in zip(waiting, ends, strict=True):
            assert abs((job.estimated_start - end).total_seconds()) <= 1
            assert "Volcano's queue order" in job.estimate_basis
    finally:  # the lab is free again for the module's other tests
        for job in jobs:
            job_cancel(job=job, user=world["alice"])
            job_delete_objects(job_id=job.pk)


def test_the_demo_command_fails_with_the_exit_code_it_names(seeded_demo):
    """KUBESIM_EXIT_CODE in the job's environment: the simulated program exits with it, each
    retry too, and the job fails saying so."""
    vision = Team.objects.get(slug="vision")
    world = {"alice": vision.memberships.get(user__username="alice").user, "vision": vision}
    job = submit(world, name="meant to fail", pool="a100", gpus_per_worker=1, retry_limit=1,
                 env={"KUBESIM_EXIT_CODE": "3", "KUBESIM_DURATION": "1s"})  # fmt: skip
    assert job_apply(job_id=job.pk) == "applied"
    job = sync_until(job, Job.State.FAILED, timeout=30)
    assert job.state == Job.State.FAILED, job.pending_reason
    assert "exited with code 3" in job.exit_reason and job.retries == 1
    assert sorted(job.pods.values_list("exit_code", flat=True)) == [3, 3]


def test_budgets_start_part_spent_and_no_queue_is_held(seeded_demo):
    month = month_start(timezone.now())
    budgets = list(Budget.objects.filter(month=month).select_related("team"))
    assert len(budgets) == 5 and any(b.enforce for b in budgets)
    for budget in budgets:
        spent = team_spend(team=budget.team, month=month)
        assert spent < budget.amount * 95 / 100, budget.team.slug
        assert budget_check(budget=budget)["held"] is False
    assert not Team.objects.exclude(queue_hold_reason="").exists()
    # Sized from the history: last month's spend is of the budget's order, not a tenth or ten
    # times it.
    last = month_start(month - timedelta(days=1))
    for budget in budgets:
        assert budget.amount / 3 < team_spend(team=budget.team, month=last) < budget.amount * 2


def test_the_history_is_billed_hour_by_hour_up_to_the_hour_in_progress(seeded_demo):
    """Every GPU of the history's pools has each hour in full (held by its pods, the rest idle)
    up to the hour in progress; last month's report has every team, its cost and the idle
    capacity; spot hours are priced as spot."""
    from django.db.models import Count, Sum

    from billing.dcgm import hour_start
    from billing.models import UsageHour
    from billing.selectors.reports import finance_report

    hours = UsageHour.objects.values("hour", "gpu_uuid").annotate(
        total=Sum("seconds_allocated") + Sum("seconds_idle"), rows=Count("id")
    )
    assert hours.count() > 50_000 and not hours.exclude(total=3600).exists()
    assert UsageHour.objects.filter(pool__name="l4-spot").exclude(mig_profile="spot").count() == 0
    latest = UsageHour.objects.order_by("-hour").first().hour
    assert latest == hour_start(timezone.now()) - timedelta(hours=1) or (
        latest >= hour_start(timezone.now()) - timedelta(hours=2)
    )
    report = finance_report(month=month_start(month_start(timezone.now()) - timedelta(days=1)))
    assert len(report["teams"]) == 5 and float(report["totals"]["cost"]) > 0
    assert report["idle_capacity"]


def test_the_history_carries_energy_and_the_report_estimates_co2e(seeded_demo):
    """The demo's usage rows carry the energy their GPUs drew (a few held hours without a
    reading), so last month's report shows kWh, CO2e and hours not measured (issue #35)."""
    from billing.models import CarbonIntensityHour, EnergySettings, UsageHour
    from billing.selectors.reports import finance_report

    held = UsageHour.objects.exclude(pod="")
    assert held.filter(energy_joules__gt=0).count() > 0.95 * held.count()
    assert held.filter(energy_joules__isnull=True).exists()
    # An A100 never draws more than its 400 W for the seconds it was held.
    a100 = held.filter(model_name="NVIDIA A100-SXM4-80GB", energy_joules__isnull=False).first()
    assert 0 < a100.energy_joules <= 400 * a100.seconds_allocated
    assert EnergySettings.current().grams_per_kwh is not None
    assert CarbonIntensityHour.objects.count() == 7 * 24
    report = finance_report(month=month_start(month_start(timezone.now()) - timedelta(days=1)))
    energy = report["totals"]["energy"]
    assert float(energy["gpu_energy_kwh"]) > 0 and float(energy["co2e_kg"]) > 0
    assert float(energy["facility_energy_kwh"]) == pytest.approx(
        float(energy["gpu_energy_kwh"]) * 1.2, abs=0.01
    )
    assert float(energy["gpu_hours_not_measured"]) > 0


def test_the_history_has_a_gpu_fault_and_its_credit(seeded_demo, client):
    """A GPU of an A100 node failed last month under a failed job: the node was tainted, then
    returned to service; the team's report for that month carries the credit, and the admin's
    GPU health page shows the node's history (issue #35)."""
    from django.contrib.auth import get_user_model
    from django.urls import reverse

    from billing.models import GpuFault, GpuFaultCredit
    from billing.selectors.reports import finance_report

    fault = GpuFault.objects.get()
    assert fault.state == "returned" and fault.xid == 79
    assert fault.node_name.startswith("a100-node-")
    credit = GpuFaultCredit.objects.get(fault=fault)
    assert credit.job.state == "failed" and credit.gpu_seconds_lost > 0 and credit.amount > 0
    month = month_start(month_start(timezone.now()) - timedelta(days=1))
    report = finance_report(month=month)
    team = next(t for t in report["teams"] if t["team"] == credit.team.slug)
    assert team["gpu_fault_credits"]["credit"] == str(credit.amount)
    assert team["gpu_fault_credits"]["lines"][0]["job_id"] == credit.job_id
    client.force_login(get_user_model().objects.get(username="admin"))
    page = client.get(reverse("billing-gpu-health-node", args=[fault.cluster_id, fault.node_name]))
    html = page.content.decode()
    assert page.status_code == 200 and "XID 79" in html and "burn-in passed" in html


def test_the_demo_shows_a_protected_job_and_a_preempted_one(seeded_demo, client):
    """The experiment tier guarantees 30 minutes: its classes are in the cluster; the history's
    preempted jobs say why they were chosen and what they lost, the month's report sums it per
    team; vision's long fine-tuning run, once running, is protected."""
    from django.contrib.auth import get_user_model
    from django.urls import reverse

    from billing.selectors.reports import build_report
    from fleet import kube
    from queues.models import JobPreemption, PriorityTier
    from queues.services.jobs.lifecycle import job_cancel
    from queues.services.protection import protection_sweep

    assert PriorityTier.objects.get(name="experiment").protection_minutes == 30
    client_ = kube.client_for(seeded_demo["cluster"])
    classes = {o["metadata"]["name"]: o["value"] for o in client_.list(
        "kueue.x-k8s.io/v1beta2", "WorkloadPriorityClass")}  # fmt: skip
    assert classes["experiment-protected"] > classes["production"]
    assert classes["experiment-saved-5m"] < classes["experiment-running"] < classes["experiment"]
    # The history: losses recorded, the checkpointed ones counted from their last checkpoint.
    assert seeded_demo["protection"]["losses"] > 0
    saved = JobPreemption.objects.filter(checkpoint_at__isnull=False).select_related("job").first()
    assert saved is not None
    assert saved.lost_gpu_seconds == saved.gpus * int(
        (saved.at - saved.checkpoint_at).total_seconds()
    )
    admin = get_user_model().objects.get(username="admin")
    client.force_login(admin)
    page = client.get(reverse("job-detail", args=[saved.job_id])).content.decode()
    assert "Chosen as a victim" in page and "because it saved" in page
    months = {saved.at.date().replace(day=1)}
    reports = [build_report(month=m) for m in months]
    assert any(t.get("preemption") for r in reports for t in r["teams"])
    # The live job, applied and running, is protected.
    live = Job.objects.get(idempotency_key="demo-protected")
    try:
        assert job_apply(job_id=live.pk) == "applied"
        live = sync_until(live, Job.State.RUNNING, timeout=30)
        assert live.state == Job.State.RUNNING
        protection_sweep(job_ids=[live.pk])
        live.refresh_from_db()
        assert live.priority_class == "experiment-protected"
        page = client.get(reverse("job-detail", args=[live.pk])).content.decode()
        assert "Protected from preemption until" in page
    finally:
        job_cancel(job=live, user=live.owner)
