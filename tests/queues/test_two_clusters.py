"""Two clusters end to end (two kubesims): a quota approved in each becomes that cluster's
ClusterQueue, and jobs for "any pool" run in each, the second going where it starts soonest."""

from queues.models import ApprovalPolicy, Job
from queues.services.jobs.apply import job_apply
from queues.services.jobs.submit import job_submit
from queues.services.quotas import quota_request_approve, quota_request_create
from queues.services.reconcile import cluster_reconcile
from tests.fixtures_cluster import make_sim_cluster
from tests.queues.builders import make_tiers, sync_until

CQ = ("kueue.x-k8s.io/v1beta2", "ClusterQueue", "qm-vision")


def _nominal(sim, pool="a100"):
    cq = sim.kube.get(*CQ)
    flavor = next(f for f in cq["spec"]["resourceGroups"][0]["flavors"] if f["name"] == pool)
    return int(flavor["resources"][-1]["nominalQuota"])


def test_quota_in_each_cluster_and_any_pool_jobs_run_in_each(world):
    make_tiers()
    ApprovalPolicy.objects.create()
    with make_sim_cluster(name="east") as east, make_sim_cluster(name="west") as west:
        for sim, gpus in ((east, 8), (west, 4)):
            sim.sync()
            request = quota_request_create(actor=world["bob"], team=world["vision"],
                                           pool=sim.pools["a100"], nominal_gpus=gpus,
                                           justification="two regions")  # fmt: skip
            quota_request_approve(quota_request=request, approver=world["maria"])
            cluster_reconcile(cluster_id=sim.cluster.pk)
        assert (_nominal(east), _nominal(west)) == (8, 4)

        def submit(name):
            return job_submit(
                user=world["alice"], team=world["vision"], name=name,
                image="ghcr.io/acme/train:1.0", command=["python", "train.py"], workers=1,
                gpus_per_worker=8 if name == "first" else 4, pool="any",
                max_runtime_seconds=3600, expected_runtime_seconds=600,
            )  # fmt: skip

        first = submit("first")
        assert first.cluster == east.cluster  # the default, free now
        assert job_apply(job_id=first.pk) == "applied"
        first = sync_until(first, Job.State.RUNNING)
        second = submit("second")  # east's quota is held by the first for ten minutes
        assert second.cluster == west.cluster
        assert job_apply(job_id=second.pk) == "applied"
        second = sync_until(second, Job.State.RUNNING)
        assert second.pods.get().node_name.startswith("a100-node-")
        names = {p["metadata"]["name"] for p in west.kube.list("v1", "Pod",
                 namespace=world["vision"].namespace)}  # fmt: skip
        assert second.pods.get().name in names and first.pods.get().name not in names
