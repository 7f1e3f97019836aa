"""JobSets (jobset.x-k8s.io v1alpha2): Kueue admits one pod set per replicated job; JobSet's
webhook makes each child Job Indexed, so its pods get stable hostnames under a headless Service
named after the JobSet; a success policy ends the JobSet when the jobs it targets complete; a
failure restarts every child Job until failurePolicy.maxRestarts is used up (the JobSet
documentation's "Overview" and "Failure Policy" pages)."""

from __future__ import annotations

from tests.scenarios import objects as o
from tests.scenarios.objects import GPU, GPU_TOLERATION

SELECTOR = "jobset.sigs.k8s.io/jobset-name={}"


def _team(sc):
    return sc.team("a100", 8, tolerations=[GPU_TOLERATION])[0]


def test_a_jobset_runs_indexed_child_jobs_with_hostnames_and_its_success_policy_ends_it(
    sc, cluster
):
    ns = _team(sc)
    driver = o.replicated_job("driver", None, annotations=cluster.runs(3))
    workers = o.replicated_job("workers", {GPU: 2}, replicas=2, pods=2,
                               annotations=cluster.runs(600),
                               tolerations=[GPU_TOLERATION])  # fmt: skip
    success = {"operator": "All", "targetReplicatedJobs": ["driver"]}
    sc.create(o.job_set("sweep", "lq", [driver, workers], success=success), ns)
    wl = sc.wait_admitted(ns, "sweep", kind="JobSet")
    assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("driver", 1),
                                                                       ("workers", 4)]  # fmt: skip
    usage = {a["name"]: (a.get("resourceUsage") or {}).get(GPU)
             for a in wl["status"]["admission"]["podSetAssignments"]}  # fmt: skip
    assert usage == {"driver": None, "workers": "8"}
    children = sc.wait(lambda: len(j := sc.list("Job", ns, SELECTOR.format("sweep"))) == 3 and j,
                       "three child Jobs")  # fmt: skip
    by_name = {j["metadata"]["name"]: j for j in children}
    assert set(by_name) == {"sweep-driver-0", "sweep-workers-0", "sweep-workers-1"}
    worker = by_name["sweep-workers-1"]
    assert worker["metadata"]["labels"]["jobset.sigs.k8s.io/job-index"] == "1"
    assert worker["spec"]["completionMode"] == "Indexed"
    assert worker["spec"]["template"]["spec"]["subdomain"] == "sweep"
    service = sc.core.read_namespaced_service("sweep", ns)
    assert service.spec.cluster_ip == "None"
    pods = sc.wait_running(
        ns, SELECTOR.format("sweep") + ",jobset.sigs.k8s.io/replicatedjob-name=workers", 4
    )
    hostnames = sorted(p.spec.hostname for p in pods)
    assert hostnames == ["sweep-workers-0-0", "sweep-workers-0-1", "sweep-workers-1-0",
                         "sweep-workers-1-1"]  # fmt: skip
    assert {p.spec.subdomain for p in pods} == {"sweep"}
    assert {p.spec.node_selector[o.POOL_LABEL] for p in pods} == {"a100"}
    # The driver's end is the JobSet's: the workers' Jobs are not waited for.
    done = sc.wait_condition("JobSet", "sweep", "Completed", ns)
    assert done["status"]["terminalState"] == "Completed"
    assert o.condition(done, "Completed")["message"] == "jobset completed successfully"
    statuses = {s["name"]: s for s in done["status"]["replicatedJobsStatus"]}
    assert statuses["driver"]["succeeded"] == 1
    sc.wait(lambda: o.is_true(sc.workload(ns, "sweep", "JobSet"), "Finished"),
            "the Workload finished")  # fmt: skip


def test_a_failed_child_restarts_the_jobset_until_max_restarts(sc, cluster):
    ns = _team(sc)
    workers = o.replicated_job("workers", {GPU: 1}, annotations=cluster.runs(1, exit_code=1),
                               tolerations=[GPU_TOLERATION])  # fmt: skip
    sc.create(o.job_set("flaky", "lq", [workers], max_restarts=1), ns)
    failed = sc.wait_condition("JobSet", "flaky", "Failed", ns)
    assert failed["status"]["restarts"] == 1
    assert failed["status"]["terminalState"] == "Failed"
    assert o.condition(failed, "Failed")["message"] == (
        "jobset failed due to reaching max number of restarts (first failed job: flaky-workers-0)"
    )
