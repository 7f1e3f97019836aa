"""Teams sharing the real control plane through the portal: a higher tier preempts a lower one
of the same team, a team reclaims the GPUs it lent within its department's cohort, a team's
fair-sharing weight divides the share Kueue reports, the namespace's guard rails (ResourceQuota,
LimitRange) are enforced by the API server beside the portal's jobs, team volumes, secrets and
registry secrets reach the jobs' pods, and billing credits the DCGM exporter's samples to the
jobs that held the devices."""

from __future__ import annotations

import time

import pytest
from kubernetes import client as k8s

from cluster.testing import wait_for
from queues.models import Job

S = Job.State


def test_a_higher_tier_preempts_a_lower_one_of_the_same_team(portal):
    portal.quota("a", "l4", 4)
    portal.reconcile()
    low = portal.submit(name="sweep", tier="development", gpus_per_worker=4, run="10m")
    low = portal.sync_until(low, S.RUNNING)
    high = portal.submit(name="launch", tier="production", gpus_per_worker=4, run="10m")
    high = portal.sync_until(high, S.RUNNING)
    low = portal.sync_until(low, S.PREEMPTED)
    assert "a higher-priority job of your own team needed the GPUs" in low.preemption_reason
    assert f"job “launch” (#{high.pk})" in low.preemption_reason
    wait_for(lambda: not [p for p in portal.pods(low) if p.status.phase == "Running"],
             what="the preempted job's pod to stop")  # fmt: skip


def test_a_team_reclaims_the_gpus_it_lent_within_its_department(portal):
    portal.quota("a", "l4", 4, borrowing_limit=4)
    portal.quota("b", "l4", 4)
    portal.reconcile()
    first = portal.submit(name="own", gpus_per_worker=4, run="10m")
    borrowed = portal.submit(name="borrowed", gpus_per_worker=4, run="10m")
    for job in (first, borrowed):
        portal.sync_until(job, S.RUNNING)
    back = portal.submit(team="b", name="mine again", gpus_per_worker=4, run="10m")
    back = portal.sync_until(back, S.RUNNING)
    for job in (first, borrowed):
        job.refresh_from_db()
    preempted = [j for j in (first, borrowed) if j.state == S.PREEMPTED]
    assert len(preempted) == 1, [(j.name, j.state) for j in (first, borrowed)]
    assert "another team of the department reclaimed the GPUs it lent" in (
        preempted[0].preemption_reason
    )
    assert f"job “mine again” (#{back.pk})" in preempted[0].preemption_reason


def _weighted_share(portal, team) -> int | None:
    cq = portal.kueue("clusterqueues", f"qm-{team.slug}")
    return ((cq.get("status") or {}).get("fairSharing") or {}).get("weightedShare")


def test_a_teams_fair_sharing_weight_divides_the_share_kueue_reports(portal):
    from queues.selectors.fair_share import weighted_shares
    from queues.services.fair_share import team_fair_share_set
    from queues.services.reconcile import cluster_check_drift

    portal.quota("a", "l4", 2)
    portal.quota("b", "l4", 6)
    portal.reconcile()
    team = portal.teams["a"]
    job = portal.submit(name="borrower", gpus_per_worker=4, run="10m")  # 2 of them borrowed
    portal.sync_until(job, S.RUNNING)
    before = wait_for(lambda: _weighted_share(portal, team), what="Kueue's weighted share")
    with portal.committing():
        team_fair_share_set(actor=portal.users["manager"], team=team, weight="2")
    cq = portal.kueue("clusterqueues", f"qm-{team.slug}")
    assert cq["spec"]["fairSharing"]["weight"] == "2"
    after = wait_for(
        lambda: (share := _weighted_share(portal, team)) and share < before and share,
        what="Kueue to weigh the share",
    )
    assert after == pytest.approx(before / 2, abs=1)
    cluster_check_drift(cluster_id=portal.cluster.pk)
    (reported,) = weighted_shares(teams=[team])[team.pk]
    assert reported["share"] == after


def test_the_namespace_guard_rails_are_enforced_by_the_api_server(portal):
    from queues.selectors.storage import team_guardrails
    from queues.services.reconcile import cluster_check_drift

    portal.quota("a", "l4", 4)
    portal.reconcile()
    namespace = portal.teams["a"].namespace
    core = portal.core
    wait_for(
        lambda: (core.read_namespaced_resource_quota("qm-guardrails", namespace).status.hard
                 or {}).get("requests.nvidia.com/gpu"),
        what="the quota controller to count the namespace",
    )  # fmt: skip
    job = portal.submit(name="inside", gpus_per_worker=3, run="10m")
    job = portal.sync_until(job, S.RUNNING)
    (pod,) = portal.pods(job)
    resources = pod.spec.containers[0].resources
    # The LimitRange's defaults add nothing to what the portal's worker asked for.
    assert set(resources.requests) == {"cpu", "memory", "nvidia.com/gpu"}  # gpu: its limit
    assert set(resources.limits) == {"memory", "nvidia.com/gpu"}

    def pod_of(name, limits=None):
        container = {"name": "main", "image": "registry.example/tool:1"}
        if limits:
            container["resources"] = {"limits": limits}
        return {"metadata": {"name": name}, "spec": {"containers": [container]}}

    with pytest.raises(k8s.ApiException) as refused:  # 3 held + 2 > the team's ceiling of 4
        core.create_namespaced_pod(namespace, pod_of("outside", {"nvidia.com/gpu": "2"}))
    assert refused.value.status == 403 and "exceeded quota: qm-guardrails" in refused.value.body
    plain = core.create_namespaced_pod(namespace, pod_of("plain"))
    defaults = plain.spec.containers[0].resources
    assert (defaults.requests["cpu"], defaults.requests["memory"]) == ("1", "2Gi")
    assert defaults.limits == {"memory": "2Gi"}
    cluster_check_drift(cluster_id=portal.cluster.pk)
    (rails,) = team_guardrails(team=portal.teams["a"])
    assert rails["gpus"] == {"limit": "4", "used": "3"}


def test_team_volumes_secrets_and_registry_secrets_reach_the_jobs_pods(portal):
    from queues.selectors.storage import volume_states
    from queues.services.reconcile import cluster_check_drift
    from queues.services.storage import secret_set, volume_create

    portal.quota("a", "l4", 4)
    portal.reconcile()
    team, lead = portal.teams["a"], portal.users["a-lead"]
    with portal.committing():
        volume = volume_create(actor=lead, team=team, cluster=portal.cluster, name="datasets",
                               size_gib=10)  # fmt: skip
    cluster_check_drift(cluster_id=portal.cluster.pk)
    # No provisioner: the claim waits, and the team's page says so.
    assert volume_states(volumes=[volume])[volume.pk] == "Pending"
    pv = f"pv-{portal.tag}"
    portal.core.create_persistent_volume({
        "metadata": {"name": pv},
        "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteMany"],
                 "hostPath": {"path": f"/data/{portal.tag}"},
                 "claimRef": {"namespace": team.namespace, "name": "datasets"}},
    })  # fmt: skip
    try:
        wait_for(lambda: portal.core.read_namespaced_persistent_volume_claim(
            "datasets", team.namespace).status.phase == "Bound",
            what="the claim to bind")  # fmt: skip
        cluster_check_drift(cluster_id=portal.cluster.pk)
        assert volume_states(volumes=[volume])[volume.pk] == "Bound"
        secret_set(actor=lead, team=team, cluster=portal.cluster, name="wandb",
                   values={"api-key": "s3cr3t"})  # fmt: skip
        secret_set(actor=lead, team=team, cluster=portal.cluster, name="ghcr", kind="registry",
                   registry="ghcr.io", username="bot", password="token")  # fmt: skip
        stored = portal.core.read_namespaced_secret("ghcr", team.namespace)
        assert stored.type == "kubernetes.io/dockerconfigjson"
        job = portal.submit(name="reads", run="10m",
                            volumes=[{"volume": "datasets", "mount_path": "/data"}],
                            secret_env={"WANDB_API_KEY": "wandb/api-key"})  # fmt: skip
        job = portal.sync_until(job, S.RUNNING)
        (pod,) = portal.pods(job)
        claim = next(v for v in pod.spec.volumes if v.persistent_volume_claim)
        assert claim.persistent_volume_claim.claim_name == "datasets"
        env = {e.name: e for e in pod.spec.containers[0].env}
        ref = env["WANDB_API_KEY"].value_from.secret_key_ref
        assert (ref.name, ref.key) == ("wandb", "api-key")
        assert [s.name for s in pod.spec.image_pull_secrets] == ["ghcr"]
    finally:
        portal.core.delete_persistent_volume(pv)


def test_billing_credits_the_exporters_samples_to_the_jobs_that_held_the_devices(portal):
    from billing.models import UsageHour
    from billing.tasks import scrape_dcgm

    portal.quota("a", "l4", 4)
    portal.quota("a", "a100-mig", 7)
    portal.quota("a", "l4-shared", 4)
    portal.reconcile()
    jobs = {
        "whole": portal.submit(name="whole", gpus_per_worker=2, run="10m"),
        "mig": portal.submit(name="slices", pool="a100-mig", gpus_per_worker=3, run="10m"),
        "shared": portal.submit(name="shares", pool="l4-shared", workers=2, run="10m"),
    }
    for job in jobs.values():
        portal.sync_until(job, S.RUNNING)
    # The beat's scrape task, twice: the second credits the time since the first.
    scrape_dcgm()
    time.sleep(2)
    assert scrape_dcgm() > 0
    rows = {name: UsageHour.objects.filter(job=job) for name, job in jobs.items()}
    assert rows["whole"].count() == 2  # one row per device the pod holds
    assert rows["mig"].count() == 3
    assert rows["shared"].count() == 2
    assert set(rows["mig"].values_list("mig_profile", flat=True)) == {"1g.5gb"}
    assert set(rows["shared"].values_list("mig_profile", flat=True)) == {"time-slice 1/4"}
    for name, job in jobs.items():
        billed = rows[name]
        assert set(billed.values_list("team_id", flat=True)) == {job.team_id}
        assert set(billed.values_list("pod", flat=True)) == set(
            job.pods.values_list("name", flat=True)
        )
        assert all(r.seconds_allocated >= 1 for r in billed), name
        assert all(r.pool_id == job.pool_id for r in billed), name
    idle = UsageHour.objects.filter(cluster=portal.cluster, pod="", team__isnull=True)
    assert idle.filter(seconds_idle__gte=1).exists()  # devices nobody held: idle capacity
