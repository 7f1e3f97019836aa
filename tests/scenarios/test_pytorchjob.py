"""PyTorchJobs (Kubeflow training operator v1): Kueue admits a master and its workers whole, the
operator gives every replica torchrun's rendezvous environment and a Service, and a replica's
restart policy decides what a failure does: `Never` fails the whole job on the first failed
replica whatever runPolicy.backoffLimit says; `OnFailure` restarts the container in place and
fails the job once the restarts reach backoffLimit; `ExitCode` fails it on a permanent exit code
(1-127) and replaces the pod on a retryable one (128 and up) (the training
operator's PyTorchJob guide and its job-level restart rules)."""

from __future__ import annotations

from tests.scenarios import objects as o
from tests.scenarios.objects import GPU, GPU_TOLERATION

SELECTOR = "training.kubeflow.org/job-name={}"


def _team(sc, gpus=8):
    return sc.team("a100", gpus, tolerations=[GPU_TOLERATION])[0]


def _ddp(sc, ns, name="ddp", *, workers=2, gpus=1, seconds=600, **kw):
    annotations = kw.pop("annotations", None) or sc.cluster.runs(seconds)
    sc.create(o.pytorch_job(name, "lq", gpus, workers=workers, annotations=annotations,
                            tolerations=[GPU_TOLERATION], **kw), ns)  # fmt: skip


def _job(sc, ns, name="ddp"):
    return sc.get("PyTorchJob", name, ns)


def test_a_pytorchjob_is_admitted_whole_and_runs_with_torchruns_environment(sc, cluster):
    ns = _team(sc)
    _ddp(sc, ns, workers=3, gpus=2, seconds=3)
    wl = sc.wait_admitted(ns, "ddp", kind="PyTorchJob")
    assert wl["metadata"]["name"].startswith("pytorchjob-ddp-")
    assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("master", 1),
                                                                       ("worker", 3)]  # fmt: skip
    usage = {a["name"]: a["resourceUsage"][GPU]
             for a in wl["status"]["admission"]["podSetAssignments"]}  # fmt: skip
    assert usage == {"master": "2", "worker": "6"}
    pods = sc.wait_running(sc_ns := ns, SELECTOR.format("ddp"), 4)
    env = {p.metadata.name: {e.name: e.value for e in p.spec.containers[0].env or []}
           for p in pods}  # fmt: skip
    assert set(env) == {"ddp-master-0", "ddp-worker-0", "ddp-worker-1", "ddp-worker-2"}
    assert env["ddp-master-0"]["RANK"] == "0"
    assert env["ddp-worker-2"]["RANK"] == "3"
    assert {e["WORLD_SIZE"] for e in env.values()} == {"4"}
    assert {e["MASTER_ADDR"] for e in env.values()} == {"ddp-master-0"}
    assert {e["MASTER_PORT"] for e in env.values()} == {"23456"}
    master = next(p for p in pods if p.metadata.name == "ddp-master-0")
    assert master.metadata.labels["training.kubeflow.org/job-role"] == "master"
    assert master.metadata.labels["training.kubeflow.org/replica-type"] == "master"
    assert master.spec.node_selector[o.POOL_LABEL] == "a100"
    sc.wait(lambda: {"ddp-master-0", "ddp-worker-0", "ddp-worker-2"}
            <= {s.metadata.name for s in sc.core.list_namespaced_service(sc_ns).items},
            "a Service per replica")  # fmt: skip
    # The master's success is the job's.
    done = sc.wait_condition("PyTorchJob", "ddp", "Succeeded", ns)
    assert o.condition(done, "Succeeded")["message"] == "PyTorchJob ddp is successfully completed."
    assert o.is_true(done, "Created")
    assert done["status"]["replicaStatuses"]["Master"]["succeeded"] == 1
    assert done["status"]["completionTime"]
    sc.wait(lambda: o.is_true(sc.workload(ns, "ddp", "PyTorchJob"), "Finished"),
            "the Workload finished")  # fmt: skip


def test_a_pytorchjob_beyond_its_quota_waits_suspended(sc, cluster):
    ns = _team(sc, gpus=4)
    _ddp(sc, ns, "big", workers=4)
    assert "insufficient quota for nvidia.com/gpu" in sc.wait_pending(ns, "big", kind="PyTorchJob")
    assert _job(sc, ns, "big")["spec"]["runPolicy"]["suspend"] is True
    assert not sc.pods(ns, SELECTOR.format("big"))


def test_restart_policy_never_fails_the_whole_job_on_the_first_failed_replica(sc, cluster):
    ns = _team(sc)
    _ddp(sc, ns, workers=1, restart="Never", backoff_limit=3, annotations=cluster.runs(600),
         worker_annotations=cluster.runs(2, exit_code=1))  # fmt: skip
    failed = sc.wait_condition("PyTorchJob", "ddp", "Failed", ns)
    assert o.condition(failed, "Failed")["message"] == (
        "PyTorchJob ddp is failed because 1 Worker replica(s) failed."
    )
    # No retry: the failed workers were not replaced (backoffLimit counts no Never replica).
    workers = sc.pods(ns, SELECTOR.format("ddp") + ",training.kubeflow.org/replica-type=worker")
    assert all(p.status.phase != "Pending" for p in workers)
    sc.wait(lambda: o.is_true(w := sc.workload(ns, "ddp", "PyTorchJob"), "Finished") and w,
            "the Workload finished")  # fmt: skip


def _restarts(pod) -> int:
    statuses = pod.status.container_statuses or []
    return statuses[0].restart_count if statuses else 0


def test_restart_policy_on_failure_restarts_in_place_until_the_backoff_limit(sc, cluster):
    ns = _team(sc)
    since = sc.core.list_namespaced_pod(ns).metadata.resource_version
    _ddp(sc, ns, workers=1, restart="OnFailure", backoff_limit=2, annotations=cluster.runs(600),
         worker_annotations=cluster.runs(1, exit_code=1))  # fmt: skip
    worker = "ddp-worker-0"

    def restarted():
        pods = [p for p in sc.pods(ns, SELECTOR.format("ddp")) if p.metadata.name == worker]
        statuses = [s for p in pods for s in (p.status.container_statuses or [])]
        return pods[0] if statuses and statuses[0].restart_count >= 1 else None

    pod = sc.wait(restarted, "the worker's container restarted in place")
    assert pod.status.container_statuses[0].last_state.terminated.exit_code == 1
    failed = sc.wait_condition("PyTorchJob", "ddp", "Failed", ns)
    assert o.condition(failed, "Failed")["message"] == (
        "Job ddp has failed because it has reached the specified backoff limit"
    )
    # The first pod was restarted in place up to the limit, never replaced while the job ran.
    # (Once the job has failed, the real operator deletes it and may create the replica once
    # more before it sees its own Failed status; that pod comes after the first one's deletion.)
    alive = [p for kind, p in sc.pod_changes(ns, worker, since, timeout=2) if kind != "DELETED"]
    history = [(p.metadata.uid, _restarts(p)) for p in alive]
    assert alive[0].metadata.uid == pod.metadata.uid
    assert {uid for uid, _ in history} == {pod.metadata.uid}, history
    assert max(restarts for _, restarts in history) >= 2, history


def test_restart_policy_exit_code_fails_on_a_permanent_code(sc, cluster):
    ns = _team(sc)
    _ddp(sc, ns, workers=1, restart="ExitCode", backoff_limit=3, annotations=cluster.runs(600),
         worker_annotations=cluster.runs(1, exit_code=1))  # fmt: skip
    failed = sc.wait_condition("PyTorchJob", "ddp", "Failed", ns)
    assert o.condition(failed, "Failed")["message"] == (
        'job "ddp" is failing because "Worker" replica(s) failed.'
    )


def test_restart_policy_exit_code_replaces_the_pod_on_a_retryable_code(sc, cluster):
    ns = _team(sc)
    _ddp(sc, ns, workers=1, restart="ExitCode", backoff_limit=2, annotations=cluster.runs(600),
         worker_annotations=cluster.runs(1, exit_code=137))  # fmt: skip
    worker = "ddp-worker-0"
    first = sc.wait(lambda: sc.running(ns, f"{SELECTOR.format('ddp')},"
                                           "training.kubeflow.org/replica-type=worker"),
                    "the worker running")[0].metadata.uid  # fmt: skip

    def replaced():
        pods = sc.pods(ns, f"{SELECTOR.format('ddp')},training.kubeflow.org/replica-type=worker")
        return [p for p in pods if p.metadata.name == worker and p.metadata.uid != first]

    sc.wait(replaced, "a new pod for the worker")
    restarting = sc.wait(lambda: o.condition(_job(sc, ns), "Restarting"), "Restarting")
    assert restarting["message"] == (
        "PyTorchJob ddp is restarting because 1 Worker replica(s) failed."
    )
    assert not o.is_true(_job(sc, ns), "Failed")
