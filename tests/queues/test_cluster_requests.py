"""What the portal asks of a cluster in the less travelled paths, end to end against kubesim:
on a Volcano cluster the drift check reads its Queues and PriorityClasses and a removed quota
deletes its leaf Queue; a cancelled Volcano job's vcjob and a cancelled multi-worker Kueue
job's headless Service are deleted. (These requests are also what the deployment's ClusterRole
must grant: tests/rbac_record.py.)"""

from queues.models import Job, PriorityTier, Quota
from queues.services.jobs.apply import job_apply, job_delete_objects
from queues.services.reconcile import cluster_check_drift, cluster_reconcile
from tests.queues.builders import submit
from tests.queues.builders import volcano_cluster as _volcano


def test_volcano_objects_are_checked_for_drift_and_deleted_when_no_longer_wanted(sim_jobs):
    cluster, kube = _volcano(sim_jobs), sim_jobs["sim"].kube
    queues = {q["metadata"]["name"] for q in kube.list("scheduling.volcano.sh/v1beta1", "Queue")}
    leaf = next(n for n in queues if n.startswith("qm-vision-l4"))
    assert cluster_check_drift(cluster_id=cluster.pk)["checked"] > 0
    Quota.objects.filter(team=sim_jobs["vision"], pool=sim_jobs["pools"]["l4"]).delete()
    tier = PriorityTier.objects.create(name="scratch", value=1)
    cluster_reconcile(cluster_id=cluster.pk)
    assert kube.get("scheduling.k8s.io/v1", "PriorityClass", "scratch")
    tier.delete()
    cluster_reconcile(cluster_id=cluster.pk)
    assert kube.get("scheduling.volcano.sh/v1beta1", "Queue", leaf) is None
    assert kube.get("scheduling.k8s.io/v1", "PriorityClass", "scratch") is None


def test_cancelled_jobs_objects_are_deleted_on_either_scheduler(sim_jobs):
    kube = sim_jobs["sim"].kube
    pair = submit(sim_jobs, name="pair", workers=2, gpus_per_worker=1)
    assert job_apply(job_id=pair.pk) == "applied"
    namespace = pair.team.namespace
    assert kube.get("v1", "Service", pair.k8s_name, namespace)
    Job.objects.filter(pk=pair.pk).update(state=Job.State.CANCELLED)
    assert job_delete_objects(job_id=pair.pk) == 2
    assert kube.get("v1", "Service", pair.k8s_name, namespace) is None
    _volcano(sim_jobs)
    gang = submit(sim_jobs, name="gang", workers=2, gpus_per_worker=1)
    assert job_apply(job_id=gang.pk) == "applied"
    Job.objects.filter(pk=gang.pk).update(state=Job.State.CANCELLED)
    assert job_delete_objects(job_id=gang.pk) == 1
    assert kube.get("batch.volcano.sh/v1alpha1", "Job", gang.k8s_name, namespace) is None
