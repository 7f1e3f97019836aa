"""Job kinds from the portal: a job becomes a batch Job, a Kubeflow PyTorchJob (master and
workers) or a JobSet (workers, and a driver); each is rendered valid against its CRD, queued by
Kueue with the queue and priority labels, synced through its states, billed by its pods and
cancelled like any job; what cannot work (a PyTorchJob on Volcano, a driver without a JobSet)
is refused with what to fix."""

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils import timezone

from billing import dcgm
from billing.models import UsageHour
from billing.services.usage import usage_scrape_record
from queues.backends import backend_named
from queues.models import Job
from queues.services.jobs.apply import job_apply, job_delete_objects
from queues.services.jobs.lifecycle import job_cancel
from tests.crd_validation import assert_valid_manifest
from tests.queues.builders import job_world_setup, make_cluster, make_pool, submit, sync_until

QUEUE = "kueue.x-k8s.io/queue-name"
PRIORITY = "kueue.x-k8s.io/priority-class"


def _errors(exc):
    return {k: " ".join(v) for k, v in exc.value.message_dict.items()}


@pytest.fixture
def offline(world):
    return job_world_setup(world)


def test_a_pytorchjob_has_a_master_and_workers_and_validates_against_its_crd(offline):
    job = submit(offline, kind="pytorchjob", workers=4, gpus_per_worker=2, retry_limit=2)
    (obj,) = backend_named("kueue").job_objects(job)
    assert_valid_manifest(obj)
    assert (obj["apiVersion"], obj["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    assert obj["metadata"]["labels"][QUEUE] == "vision"
    assert obj["metadata"]["labels"][PRIORITY] == job.tier.name
    spec = obj["spec"]
    # The training operator fails the job at a failed replica whose restart policy is Never:
    # two retries are OnFailure (restarted in place) and a backoff limit of 3, which the
    # operator meets at the third failure, counted over all replicas.
    assert spec["runPolicy"] == {"suspend": True, "backoffLimit": 3, "cleanPodPolicy": "Running",
                                 "activeDeadlineSeconds": 3600}  # fmt: skip
    replicas = spec["pytorchReplicaSpecs"]
    assert (replicas["Master"]["replicas"], replicas["Worker"]["replicas"]) == (1, 3)
    for replica in replicas.values():
        assert replica["restartPolicy"] == "OnFailure"
        assert replica["template"]["spec"]["restartPolicy"] == "OnFailure"
    container = replicas["Worker"]["template"]["spec"]["containers"][0]
    assert container["name"] == "pytorch"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert container["ports"][0]["name"] == "pytorchjob-port"
    single = submit(offline, name="one", kind="pytorchjob", workers=1)
    (obj,) = backend_named("kueue").job_objects(single)
    assert set(obj["spec"]["pytorchReplicaSpecs"]) == {"Master"}
    # No retries: the first failed replica fails the job.
    assert obj["spec"]["runPolicy"]["backoffLimit"] == 0
    assert obj["spec"]["pytorchReplicaSpecs"]["Master"]["restartPolicy"] == "Never"


def test_a_jobset_runs_the_workers_and_completes_with_its_driver(offline):
    job = submit(offline, kind="jobset", workers=3, driver_command=["python", "driver.py"])
    (obj,) = backend_named("kueue").job_objects(job)
    assert_valid_manifest(obj)
    assert (obj["apiVersion"], obj["kind"]) == ("jobset.x-k8s.io/v1alpha2", "JobSet")
    spec = obj["spec"]
    assert spec["suspend"] is True
    assert [(rj["name"], rj["replicas"]) for rj in spec["replicatedJobs"]] == [
        ("driver", 1), ("workers", 3),
    ]  # fmt: skip
    assert spec["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["driver"]}
    driver = spec["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    assert driver["command"] == ["python", "driver.py"]
    assert "nvidia.com/gpu" not in str(driver["resources"])
    worker = spec["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in worker["env"]}
    assert env["NODE_RANK"]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.annotations['jobset.sigs.k8s.io/job-index']"
    )
    assert env["MASTER_ADDR"]["value"] == f"{job.k8s_name}-workers-0-0.{job.k8s_name}"
    plain = submit(offline, name="plain", kind="jobset", workers=2)
    (obj,) = backend_named("kueue").job_objects(plain)
    assert [rj["name"] for rj in obj["spec"]["replicatedJobs"]] == ["workers"]
    assert obj["spec"]["successPolicy"]["targetReplicatedJobs"] == ["workers"]


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"kind": "mpijob"}, "kind", "Choose one of job, pytorchjob, jobset"),
        ({"driver_command": ["python", "d.py"]}, "driver_command", "Only a JobSet has a driver"),
        ({"kind": "jobset", "driver_command": "python d.py"}, "driver_command",
         "Give a list of strings"),
    ],
)  # fmt: skip
def test_kinds_that_cannot_work_are_refused(offline, overrides, field, message):
    with pytest.raises(ValidationError) as refused:
        submit(offline, **overrides)
    assert message in _errors(refused)[field]
    assert not Job.objects.exists()


def test_pytorchjobs_need_kueue(world):
    from tests.queues.builders import make_quotas, make_tiers

    volcano = make_cluster("vc", scheduler="volcano")
    pools = {"a100": make_pool(volcano, "a100"), "l4": make_pool(volcano, "l4")}
    make_quotas(world, pools)
    spec = {"tiers": make_tiers(), **world}
    with pytest.raises(ValidationError) as refused:
        submit(spec, kind="pytorchjob")
    assert "is queued by Kueue; this job's pool is on a Volcano cluster" in _errors(refused)["kind"]


def test_the_api_takes_the_kind_and_shows_it(api, offline):
    api.force_authenticate(offline["alice"])
    body = {"team": "vision", "name": "ddp", "image": "ghcr.io/acme/train:1.0",
            "command": ["python", "train.py"], "workers": 2, "gpus_per_worker": 1,
            "pool": "a100", "max_runtime_seconds": 600}  # fmt: skip
    bad = api.post("/api/v1/jobs/", {**body, "kind": "tfjob"}, format="json")
    assert bad.status_code == 400 and "kind" in bad.json()
    driver = {"kind": "jobset", "driver_command": ["python", "driver.py"]}
    made = api.post("/api/v1/jobs/", {**body, **driver}, format="json")
    assert made.status_code == 201, made.json()
    assert made.json()["kind"] == "jobset"
    assert made.json()["driver_command"] == ["python", "driver.py"]


def _gpu_pods(job):
    return {p.name: p.gpus for p in job.pods.all()}


def test_a_pytorchjob_runs_in_kubesim_is_billed_by_its_pods_and_finishes(sim_jobs, client):
    job = submit(sim_jobs, name="ddp", kind="pytorchjob", workers=2, gpus_per_worker=2,
                 expected_runtime_seconds=4)  # fmt: skip
    assert job_apply(job_id=job.pk) == "applied"
    job.refresh_from_db()
    assert job.workload_name.startswith(f"pytorchjob-{job.k8s_name}-")
    job = sync_until(job, Job.State.RUNNING)
    assert job.state == Job.State.RUNNING
    assert job.admitted_pool == sim_jobs["pools"]["a100"]
    pods = _gpu_pods(job)
    assert pods == {f"{job.k8s_name}-master-0": 2, f"{job.k8s_name}-worker-0": 2}
    # The DCGM exporter's series of its pods are billed to the job.
    cluster = sim_jobs["cluster"]
    url = f"{sim_jobs['sim'].sim.url}/metrics/dcgm"
    at = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=2)
    samples = dcgm.scrape(url)
    for k in range(3):
        usage_scrape_record(cluster=cluster, url=url, samples=samples,
                            scraped_at=at + timedelta(seconds=30 * k))  # fmt: skip
    billed = UsageHour.objects.filter(job=job)
    assert set(billed.values_list("pod", flat=True)) == set(pods)
    job = sync_until(job, Job.State.SUCCEEDED)
    assert job.state == Job.State.SUCCEEDED
    timeline = list(job.transitions.values_list("to_state", flat=True))
    assert timeline[-3:] == ["admitted", "running", "succeeded"]
    client.force_login(sim_jobs["alice"])
    page = client.get(reverse("job-detail", args=[job.pk])).content.decode()
    assert "PyTorchJob: 1 master, 1 worker" in page
    # Cancelled: the PyTorchJob (and with it its pods and Services) leaves the cluster.
    other = submit(sim_jobs, name="stop", kind="pytorchjob", workers=1, gpus_per_worker=1,
                   expected_runtime_seconds=60)  # fmt: skip
    assert job_apply(job_id=other.pk) == "applied"
    job_cancel(job=other, user=sim_jobs["alice"])
    assert job_delete_objects(job_id=other.pk) == 1
    kube = sim_jobs["sim"].kube
    assert kube.get("kubeflow.org/v1", "PyTorchJob", other.k8s_name, other.team.namespace) is None


def test_a_jobset_with_a_driver_runs_and_a_cancelled_one_leaves_the_cluster(sim_jobs):
    kube = sim_jobs["sim"].kube
    job = submit(sim_jobs, name="set", kind="jobset", workers=2, gpus_per_worker=1,
                 driver_command=["python", "driver.py"], expected_runtime_seconds=3)  # fmt: skip
    assert job_apply(job_id=job.pk) == "applied"
    job = sync_until(job, Job.State.SUCCEEDED)
    assert job.state == Job.State.SUCCEEDED, job.pending_reason
    pods = _gpu_pods(job)
    assert [g for n, g in pods.items() if "-driver-" in n] == [0]
    assert sorted(g for n, g in pods.items() if "-workers-" in n) == [1, 1]
    # A second one, cancelled while it runs: its JobSet and child Jobs are deleted.
    other = submit(sim_jobs, name="gone", kind="jobset", workers=1, gpus_per_worker=1,
                   expected_runtime_seconds=60)  # fmt: skip
    assert job_apply(job_id=other.pk) == "applied"
    other = sync_until(other, Job.State.RUNNING)
    assert other.state == Job.State.RUNNING
    job_cancel(job=other, user=sim_jobs["alice"])
    assert job_delete_objects(job_id=other.pk) == 1  # the task the cancel queues
    assert kube.get("jobset.x-k8s.io/v1alpha2", "JobSet", other.k8s_name,
                    other.team.namespace) is None  # fmt: skip


def test_export_manifests_writes_each_jobs_objects_valid_against_their_crds(offline, tmp_path):
    import yaml
    from django.core.management import call_command

    for kind in ("job", "pytorchjob", "jobset"):
        submit(offline, name=f"export {kind}", kind=kind, workers=2,
               driver_command=["python", "d.py"] if kind == "jobset" else [])  # fmt: skip
    call_command("export_manifests", str(tmp_path), "--jobs")
    written = {p.name: yaml.safe_load(p.read_text()) for p in (tmp_path / "jobs").iterdir()}
    kinds = sorted(m["kind"] for m in written.values())
    assert kinds == ["Job", "JobSet", "PyTorchJob", "Service"]
    for manifest in written.values():  # CRD or Kubernetes schema, unknown fields refused
        assert_valid_manifest(manifest)
