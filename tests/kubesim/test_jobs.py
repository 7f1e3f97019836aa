"""kubesim's batch/v1 Job controller, without Kueue: pods, indexes, completion, failure."""

from kubernetes import client

from tests.kubesim.kueue_helpers import conditions_of, job, job_pods, wait_for


def _finished(batch, namespace, name):
    for cond in conditions_of(batch.read_namespaced_job(name, namespace)):
        if cond.type in ("Complete", "Failed") and cond.status == "True":
            return cond
    return None


def test_indexed_job_creates_indexed_pods_and_completes(k8s, namespace):
    batch = client.BatchV1Api(k8s)
    job(k8s, namespace, "idx", workers=3, gpus=1, duration=0.5, queue=None)
    pods = wait_for(lambda: len(job_pods(k8s, namespace, "idx")) == 3 and job_pods(
        k8s, namespace, "idx"))  # fmt: skip
    by_index = {}
    for pod in pods:
        index = pod.metadata.annotations["batch.kubernetes.io/job-completion-index"]
        assert pod.metadata.labels["batch.kubernetes.io/job-completion-index"] == index
        assert pod.metadata.name.startswith(f"idx-{index}-")
        env = {e.name: e.value for e in pod.spec.containers[0].env}
        assert env["JOB_COMPLETION_INDEX"] == index
        owner = pod.metadata.owner_references[0]
        assert (owner.kind, owner.name, owner.controller) == ("Job", "idx", True)
        assert pod.metadata.labels["job-name"] == "idx"
        assert pod.metadata.labels["controller-uid"] == owner.uid
        by_index[index] = pod
    assert sorted(by_index) == ["0", "1", "2"]

    cond = wait_for(lambda: _finished(batch, namespace, "idx"), message="job completion")
    assert cond.type == "Complete"
    status = batch.read_namespaced_job("idx", namespace).status
    assert status.succeeded == 3
    assert status.completed_indexes == "0-2"
    assert status.start_time is not None and status.completion_time is not None
    assert not status.active


def test_failed_pods_exceed_backoff_limit(k8s, namespace):
    batch = client.BatchV1Api(k8s)
    body = {
        "metadata": {"name": "flaky"},
        "spec": {
            "backoffLimit": 1,
            "template": {
                "metadata": {
                    "annotations": {
                        "kubesim.dev/duration-seconds": "0.2",
                        "kubesim.dev/exit-code": "1",
                    }
                },
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]},
            },
        },
    }
    batch.create_namespaced_job(namespace, body)
    cond = wait_for(lambda: _finished(batch, namespace, "flaky"), message="job failure")
    assert (cond.type, cond.reason) == ("Failed", "BackoffLimitExceeded")
    assert batch.read_namespaced_job("flaky", namespace).status.failed == 2


def test_active_deadline_fails_the_job_and_stops_its_pods(k8s, namespace):
    batch = client.BatchV1Api(k8s)
    body = {
        "metadata": {"name": "slow"},
        "spec": {
            "activeDeadlineSeconds": 1,
            "template": {
                "metadata": {"annotations": {"kubesim.dev/duration-seconds": "600"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]},
            },
        },
    }
    batch.create_namespaced_job(namespace, body)
    cond = wait_for(lambda: _finished(batch, namespace, "slow"), message="deadline")
    assert cond.reason == "DeadlineExceeded"
    wait_for(lambda: not job_pods(k8s, namespace, "slow"), message="pods deleted")


def test_suspended_job_has_no_pods_until_resumed(k8s, namespace):
    batch = client.BatchV1Api(k8s)
    job(k8s, namespace, "paused", workers=2, gpus=1, queue=None)
    batch.patch_namespaced_job("paused", namespace, {"spec": {"suspend": True}})

    def suspended():
        conds = conditions_of(batch.read_namespaced_job("paused", namespace))
        return any(c.type == "Suspended" and c.status == "True" for c in conds)

    wait_for(suspended, message="Suspended condition")
    wait_for(lambda: not job_pods(k8s, namespace, "paused"))
    batch.patch_namespaced_job("paused", namespace, {"spec": {"suspend": False}})
    wait_for(lambda: len(job_pods(k8s, namespace, "paused")) == 2, message="pods after resume")
