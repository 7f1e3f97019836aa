"""Preemption protection on the real control plane (issue #35): real Kueue (the version pinned in
cluster/build/k8s/go.mod) accepts the WorkloadPriorityClasses the portal renders and the change
of a running Job's priority-class label, gives the Workload the new class's priority without
stopping it, spares the protected jobs when another team reclaims its GPUs, and, past the window,
takes the job that saved last."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from cluster.testing import wait_for
from queues.manifests.protection import protected_value
from queues.models import Job, PriorityTier
from queues.services import protection

S = Job.State


@pytest.fixture
def protected(portal):
    """Team a: 4 L4 GPUs; team b: 2 it lends. The experiment tier guarantees 10 minutes."""
    PriorityTier.objects.filter(name="experiment").update(protection_minutes=10)
    portal.quota("a", "l4", 4)
    portal.quota("b", "l4", 2)
    portal.reconcile()
    return portal


def _workload(portal, job) -> dict:
    (wl,) = [
        w for w in portal.custom.list_namespaced_custom_object(
            "kueue.x-k8s.io", "v1beta2", job.team.namespace, "workloads")["items"]
        if any(o["name"] == job.k8s_name for o in w["metadata"].get("ownerReferences", []))
    ]  # fmt: skip
    return wl


def _sweep(portal, now):
    with portal.committing():
        protection.protection_sweep(now=now)


def test_real_kueue_follows_the_classes_and_takes_the_job_that_saved_last(protected):
    portal = protected
    classes = {
        c["metadata"]["name"]: c["value"]
        for c in portal.custom.list_cluster_custom_object(
            "kueue.x-k8s.io", "v1beta2", "workloadpriorityclasses")["items"]
    }  # fmt: skip
    tiers = list(PriorityTier.objects.all())
    experiment = next(t for t in tiers if t.name == "experiment")
    assert classes["experiment-protected"] == protected_value(experiment, tiers)
    assert classes["experiment-saved-15m"] == experiment.value - 3
    cq = portal.kueue("clusterqueues", f"qm-{portal.teams['a'].slug}")
    assert cq["spec"]["preemption"]["reclaimWithinCohort"] == "LowerPriority"

    jobs = [portal.submit(name=n, gpus_per_worker=2, run="2h", tier="experiment",
                          max_runtime_seconds=86400) for n in ("one", "two", "three")]  # fmt: skip
    jobs = [portal.sync_until(j, S.RUNNING) for j in jobs]
    now = timezone.now()
    _sweep(portal, now)
    for job in jobs:
        job.refresh_from_db()
        assert job.priority_class_applied == "experiment-protected"
        wait_for(lambda j=job: _workload(portal, j)["spec"].get("priority")
                 == classes["experiment-protected"], timeout=30, interval=0.5,
                 what=f"{job.name}'s Workload to take the protected priority")  # fmt: skip

    # b wants its 2 GPUs back: nothing it may reclaim while a's jobs are protected.
    theirs = portal.submit(team="b", name="back", gpus_per_worker=2, run="2h",
                           tier="experiment", max_runtime_seconds=86400)  # fmt: skip
    for _ in range(6):
        portal.sync()
    theirs.refresh_from_db()
    assert theirs.state == S.QUEUED
    assert all(Job.objects.get(pk=j.pk).state == S.RUNNING for j in jobs)

    # Two saves; past the window the later one is the lowest, and Kueue takes it.
    with portal.committing():
        protection.checkpoint_report(job=jobs[0], actor=portal.users["a"], step=1,
                                     at=now - timedelta(minutes=30))  # fmt: skip
        protection.checkpoint_report(job=jobs[1], actor=portal.users["a"], step=2)
    _sweep(portal, now + timedelta(minutes=11))
    second = portal.sync_until(jobs[1], S.PREEMPTED)
    assert second.preemptions == 1
    portal.sync_until(theirs, S.RUNNING)
    assert Job.objects.get(pk=jobs[0].pk).state == S.RUNNING
    assert Job.objects.get(pk=jobs[2].pk).state == S.RUNNING
    assert second.preemption_losses.get().priority_class == "experiment-saved-15m"
