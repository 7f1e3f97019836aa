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


def _env_job(batch, namespace, name, env, *, backoff=0):
    """A Job whose container says what its program does through kubesim's env vars (as a job
    submitted through the portal, which writes no kubesim annotations, says it)."""
    body = {
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": backoff,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "x",
                                    "env": [{"name": k, "value": v} for k, v in env.items()]}],
                },
            },
        },
    }  # fmt: skip
    batch.create_namespaced_job(namespace, body)


def _pod_codes(k8s, namespace, name):
    """Exit codes of the job's ended pods, oldest first."""
    pods = sorted(job_pods(k8s, namespace, name), key=lambda p: p.metadata.creation_timestamp)
    codes = []
    for pod in pods:
        for cs in pod.status.container_statuses or []:
            if cs.state.terminated is not None:
                codes.append(cs.state.terminated.exit_code)
    return codes


def test_a_container_env_makes_its_program_fail_with_that_exit_code(k8s, namespace):
    """KUBESIM_EXIT_CODE and KUBESIM_DURATION: the demo's way to make a job fail (or run long)
    without kubesim annotations; each retry fails alike until the backoff limit."""
    batch = client.BatchV1Api(k8s)
    _env_job(batch, namespace, "fails", {"KUBESIM_EXIT_CODE": "3", "KUBESIM_DURATION": "0.3s"},
             backoff=1)  # fmt: skip
    cond = wait_for(lambda: _finished(batch, namespace, "fails"), message="job failure")
    assert (cond.type, cond.reason) == ("Failed", "BackoffLimitExceeded")
    assert _pod_codes(k8s, namespace, "fails") == [3, 3]
    pod = job_pods(k8s, namespace, "fails")[0]
    assert pod.status.phase == "Failed"
    assert pod.status.container_statuses[0].state.terminated.reason == "Error"


def test_a_flaky_program_fails_its_first_attempts_and_a_retry_succeeds(k8s, namespace):
    batch = client.BatchV1Api(k8s)
    env = {"KUBESIM_EXIT_CODE": "137", "KUBESIM_FAIL_ATTEMPTS": "1", "KUBESIM_DURATION": "0.3"}
    _env_job(batch, namespace, "flaky-once", env, backoff=2)
    cond = wait_for(lambda: _finished(batch, namespace, "flaky-once"), message="job end")
    assert cond.type == "Complete"
    assert _pod_codes(k8s, namespace, "flaky-once") == [137, 0]


def test_kubesim_durations_read_as_people_write_them():
    from kubesim.kubelet import parse_duration, pod_duration, pod_exit_code

    assert [parse_duration(t) for t in ("90", "90s", "15m", "2h", "1d", "0.5")] == [
        90, 90, 900, 7200, 86400, 0.5,
    ]  # fmt: skip
    for bad in ("", "soon", "-5m", "2w"):
        try:
            parse_duration(bad)
        except ValueError:
            continue
        raise AssertionError(bad)

    def pod(env=None, annotations=None):
        return {"metadata": {"name": "p", "annotations": annotations or {}},
                "spec": {"containers": [{"name": "c", "env": [
                    {"name": k, "value": v} for k, v in (env or {}).items()]}]}}  # fmt: skip

    assert pod_duration(pod()) == 300
    assert pod_duration(pod(annotations={"quartermaster.dev/expected-runtime-seconds": "60"})) == 60
    expected = {"quartermaster.dev/expected-runtime-seconds": "60"}
    assert pod_duration(pod({"KUBESIM_DURATION": "2h"}, expected)) == 7200
    # kubesim's own annotation (the tests' hook) wins; a duration it cannot read is passed over.
    assert pod_duration(pod({"KUBESIM_DURATION": "2h"},
                            {"kubesim.dev/duration-seconds": "5"})) == 5  # fmt: skip
    assert pod_duration(pod({"KUBESIM_DURATION": "later"})) == 300
    assert pod_exit_code(pod()) == 0
    assert pod_exit_code(pod({"KUBESIM_EXIT_CODE": "3"})) == 3
    assert pod_exit_code(pod({"KUBESIM_EXIT_CODE": "x"})) == 1
    assert pod_exit_code(pod({"KUBESIM_EXIT_CODE": "3", "KUBESIM_FAIL_ATTEMPTS": "2"}),
                         earlier_failures=2) == 0  # fmt: skip
    assert pod_exit_code(pod({"KUBESIM_EXIT_CODE": "3"}, {"kubesim.dev/exit-code": "0"})) == 0
