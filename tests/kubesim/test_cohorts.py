"""Hierarchical cohorts in kubesim's Kueue: quota arithmetic over a tree of Cohorts, Cohort
weights in fair sharing, and fair-sharing preemption down the tree. The scenarios are those of
Kueue's Cohort concept page and its fair-sharing integration tests (the figures they expect:
shares, and how many workloads each queue ends up with)."""

from __future__ import annotations

import pytest
from kubernetes import client

from kubesim.kueue import KueueEngine
from kubesim.store import Store
from kueuemodel import cohorts
from kueuemodel.replay import ReplayJob, replay
from kueuemodel.types import ADMITTED
from tests.kubesim.kueue_helpers import condition, create, get, wait_for

GPU = "nvidia.com/gpu"
FLAVOR = "a100"


def _rg(nominal, borrowing=None, lending=None) -> list[dict]:
    resource = {"name": GPU, "nominalQuota": nominal}
    if borrowing is not None:
        resource["borrowingLimit"] = borrowing
    if lending is not None:
        resource["lendingLimit"] = lending
    return [{"coveredResources": [GPU], "flavors": [{"name": FLAVOR, "resources": [resource]}]}]


def _cohort(name, parent=None, *, weight=None, quota=None, borrowing=None, lending=None) -> dict:
    spec: dict = {}
    if parent:
        spec["parentName"] = parent
    if weight is not None:
        spec["fairSharing"] = {"weight": weight}
    if quota is not None:
        spec["resourceGroups"] = _rg(quota, borrowing, lending)
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Cohort", "metadata": {"name": name},
            "spec": spec}  # fmt: skip


def _cq(name, cohort, nominal=0, *, weight=None, borrowing=None, lending=None, **preemption):
    spec: dict = {"cohortName": cohort, "namespaceSelector": {},
                  "resourceGroups": _rg(nominal, borrowing, lending)}  # fmt: skip
    if preemption:
        spec["preemption"] = preemption
    if weight is not None:
        spec["fairSharing"] = {"weight": weight}
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
            "metadata": {"name": name}, "spec": spec}  # fmt: skip


def _lq(cq: str) -> dict:
    """The LocalQueue of a ClusterQueue, in a namespace named after it."""
    return {"metadata": {"name": "main", "namespace": cq}, "spec": {"clusterQueue": cq}}


def _job(key, cq, submit, *, gpus=1, priority=0, runtime=10_000) -> ReplayJob:
    return ReplayJob(key=key, namespace=cq, queue="main", pool=FLAVOR, resource=GPU,
                     workers=1, gpus_per_worker=gpus, priority=priority, submit=submit,
                     runtime=runtime)  # fmt: skip


class _Watch:
    """The replay's engine, kept to read its queues and shares when the replay is done."""

    def __init__(self, monkeypatch):
        import kueuemodel.replay as module

        self.engine = None
        watch = self

        class Engine(module.ReplayEngine):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                watch.engine = self

        monkeypatch.setattr(module, "ReplayEngine", Engine)

    def admitted(self) -> dict[str, int]:
        out = {}
        for name, cq in self.engine.cqs.items():
            out[name] = sum(1 for k in cq.admitted if self.engine.workloads[k].state == ADMITTED)
        return out

    def share(self, name: str) -> int:
        node = self.engine.cohorts.get(name) or self.engine.cqs[name]
        return self.engine.share(node).weighted


def _run(cohort_objs, cqs, jobs, *, horizon=1000, fair_sharing=True):
    return replay(cluster_queues=cqs, local_queues=[_lq(c["metadata"]["name"]) for c in cqs],
                  cohorts=cohort_objs, pools={FLAVOR: [1000]}, jobs=jobs, horizon=horizon,
                  fair_sharing=fair_sharing)  # fmt: skip


# -- the quota arithmetic ----------------------------------------------------------------------


def _engine(cohort_objs, cqs) -> KueueEngine:
    engine = KueueEngine(Store(system_namespaces=False))
    engine.flavors = {FLAVOR: {"spec": {}}}
    engine.cohort_objs = {c["metadata"]["name"]: c for c in cohort_objs}
    engine.cq_objs = {c["metadata"]["name"]: c for c in cqs}
    engine.rebuild()
    return engine


def test_a_cohort_lends_its_subtree_to_its_parent_within_its_lending_limit():
    #        org (4 of its own)
    #       /        \
    #   dept-a         dept-b
    #   lends ≤ 2      cq-b (0)
    #   cq-a1 (6), cq-a2 (2)
    engine = _engine(
        [_cohort("org", quota=4), _cohort("dept-a", "org", quota=0, lending=2),
         _cohort("dept-b", "org")],
        [_cq("cq-a1", "dept-a", 6), _cq("cq-a2", "dept-a", 2), _cq("cq-b", "dept-b", 0)],
    )  # fmt: skip
    fr = (FLAVOR, GPU)
    a1, a2, b = (engine.cqs[n] for n in ("cq-a1", "cq-a2", "cq-b"))
    dept_a, org = engine.cohorts["dept-a"], engine.cohorts["org"]
    assert dept_a.subtree[fr] == 8 and dept_a.local[fr] == 6  # keeps 8 - 2
    assert org.subtree[fr] == 4 + 2  # its own 4 and the 2 dept-a lends
    # cq-b can reach the organisation's 4 and what dept-a lends: 6; cq-a1 all of dept-a and
    # the organisation's own 4: 12.
    assert engine.capacity(b, FLAVOR, GPU) == 6
    assert engine.capacity(a1, FLAVOR, GPU) == 12
    engine._charge(b, {fr: 6}, +1)
    assert org.usage[fr] == 6 and engine.available(b, FLAVOR, GPU) == 0
    # dept-a's teams still have all of dept-a's kept quota.
    assert engine.available(a1, FLAVOR, GPU) == 6
    engine._charge(a2, {fr: 5}, +1)  # 3 above its own 2: within what dept-a keeps, so far
    assert dept_a.usage[fr] == 5 and org.usage[fr] == 6
    assert engine.available(a1, FLAVOR, GPU) == 1
    engine._charge(a1, {fr: 2}, +1)  # one more than dept-a keeps: over its subtree
    assert dept_a.usage[fr] == 7 and org.usage[fr] == 7
    engine._charge(a1, {fr: 2}, -1)
    engine._charge(a2, {fr: 5}, -1)
    engine._charge(b, {fr: 6}, -1)
    assert (dept_a.usage[fr], org.usage[fr]) == (0, 0)


def test_a_cohorts_borrowing_limit_caps_what_its_queues_take_from_above():
    engine = _engine(
        [_cohort("org", quota=10), _cohort("dept", "org", quota=0, borrowing=3)],
        [_cq("cq", "dept", 2)],
    )
    cq = engine.cqs["cq"]
    assert engine.capacity(cq, FLAVOR, GPU) == 5  # its 2 and at most 3 from the organisation
    engine._charge(cq, {(FLAVOR, GPU): 4}, +1)
    assert engine.available(cq, FLAVOR, GPU) == 1


def test_a_cycle_of_parents_stops_its_queues_and_a_missing_parent_is_implied():
    engine = _engine(
        [_cohort("x", "y"), _cohort("y", "x"), _cohort("z", "nowhere")],
        [_cq("in-cycle", "x", 4), _cq("fine", "z", 4), _cq("other", "nowhere", 2)],
    )
    assert engine.cqs["in-cycle"].in_cycle and not engine.cqs["in-cycle"].is_active
    fine = engine.cqs["fine"]
    assert fine.is_active and fine.parent.parent is engine.cohorts["nowhere"]
    assert engine.capacity(fine, FLAVOR, GPU) == 6  # borrows "other"'s 2 through "nowhere"


def test_shares_follow_kueues_formula_and_round_up():
    node = cohorts.Share(ratio=1000 / 9)
    assert node.weighted == 112  # 111.1…: Kueue's status rounds up
    assert cohorts.Share(ratio=250.0, weight=0.0).weighted == cohorts.MAX_SHARE
    assert cohorts.Share(weight=0.0).weighted == 0  # a zero weight that borrows nothing
    assert cohorts.Share(ratio=1.0, weight=0.0).key > cohorts.Share(ratio=1e9).key


# -- Kueue's scenarios -------------------------------------------------------------------------


def test_fair_share_is_measured_at_each_level_of_the_tree(monkeypatch):
    # Kueue's "using hierarchical cohorts: admits workloads respecting fair share":
    #         root
    #        /    \
    #   first-left  first-right
    #     /    \          \
    # second-left second-right  bank (10 of its own)
    watch = _Watch(monkeypatch)
    cohort_objs = [_cohort("root"), _cohort("first-left", "root"),
                   _cohort("first-right", "root"), _cohort("second-left", "first-left"),
                   _cohort("second-right", "first-left"),
                   _cohort("bank", "first-right", quota=10)]  # fmt: skip
    cqs = [_cq("second-left", "second-left", 2), _cq("second-right", "second-right", 2)]
    jobs = []
    for i in range(5):
        jobs += [_job(f"l{i}", "second-left", i), _job(f"r{i}", "second-right", i)]
    _run(cohort_objs, cqs, jobs)
    assert watch.admitted() == {"second-left": 5, "second-right": 5}
    # Each borrows 3 of the 14 GPUs the tree holds; first-left, 6 of them.
    assert watch.share("first-left") == 429  # 6000 / 14, rounded up
    assert watch.share("second-left") == watch.share("second-right") == 215  # 3000 / 14
    assert watch.share("first-right") == watch.share("bank") == 0


def test_preemption_enforces_fair_share_at_each_level_with_cohort_weights(monkeypatch):
    # Kueue's "using hierarchical cohorts: preempts workloads to enforce fair share": the root
    # holds 12 GPUs, every queue none.
    #               root (12)
    #             /          \
    #   best-effort (0.5)   research
    #                      /   |    \
    #              chemistry physics llm (2.0)
    watch = _Watch(monkeypatch)
    cohort_objs = [_cohort("root", quota=12), _cohort("research", "root"),
                   _cohort("chemistry", "research"), _cohort("physics", "research"),
                   _cohort("llm", "research", weight="2.0"),
                   _cohort("best-effort", "root", weight="0.5")]  # fmt: skip
    reclaim = {"reclaimWithinCohort": "LowerPriority"}
    cqs = [_cq("chemistry-queue", "chemistry", **reclaim),
           _cq("physics-queue", "physics", **reclaim), _cq("llm-queue", "llm", **reclaim),
           _cq("best-effort-queue", "best-effort")]  # fmt: skip
    jobs = []
    for i in range(6):  # all capacity used, at a low priority
        jobs += [_job(f"be-low{i}", "best-effort-queue", 0, priority=-1),
                 _job(f"ph-low{i}", "physics-queue", 0, priority=-1)]  # fmt: skip
    for i in range(6):  # then six urgent workloads in every queue
        jobs += [_job(f"{cq['metadata']['name']}-{i}", cq["metadata"]["name"], 100, priority=100)
                 for cq in cqs]  # fmt: skip
    result = _run(cohort_objs, cqs, jobs)
    assert watch.admitted() == {"chemistry-queue": 2, "physics-queue": 2, "llm-queue": 4,
                                "best-effort-queue": 4}  # fmt: skip
    # Fair with respect to each parent: best-effort's 4 of 12 over 0.5 against research's 8;
    # within research, llm's 4 over 2 against 2 each.
    assert watch.share("best-effort") == watch.share("research") == 667
    assert watch.share("chemistry") == watch.share("physics") == watch.share("llm") == 167
    # Only the low-priority workloads were preempted (best-effort cannot preempt, and the
    # others may only take lower priorities).
    preempted = {j.key for j in result.jobs if j.preempted}
    assert preempted and all("low" in key for key in preempted)


def test_cohort_weights_split_the_common_quota_as_the_concept_page_says(monkeypatch):
    # Kueue's Cohort concept page: important-org (0.75) and regular-org (0.25) under
    # root-cohort trend to 75 % and 25 % of the common resources. regular-org asks first and
    # takes everything; important-org asks later and takes its part back.
    watch = _Watch(monkeypatch)
    cohort_objs = [_cohort("root-cohort", quota=8),
                   _cohort("important-org", "root-cohort", weight="0.75"),
                   _cohort("regular-org", "root-cohort", weight="0.25")]  # fmt: skip
    preempt = {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}
    cqs = [_cq("important", "important-org", **preempt), _cq("regular", "regular-org", **preempt)]
    jobs = [_job(f"r{i}", "regular", 0) for i in range(8)]
    jobs += [_job(f"i{i}", "important", 10) for i in range(8)]
    result = _run(cohort_objs, cqs, jobs)
    assert watch.admitted() == {"important": 6, "regular": 2}
    evicted = [j for j in result.jobs if j.preempted]
    assert sorted(j.key for j in evicted) == [f"r{i}" for i in range(2, 8)]
    # Without weights the two would share evenly.
    even = _Watch(monkeypatch)
    for c in cohort_objs[1:]:
        c["spec"].pop("fairSharing")
    for job in jobs:
        job.admitted = job.started = job.ended = None
        job.preempted = 0
    _run(cohort_objs, cqs, jobs)
    assert even.admitted() == {"important": 4, "regular": 4}


def test_without_fair_sharing_a_department_reclaims_what_it_lent_through_the_root(monkeypatch):
    watch = _Watch(monkeypatch)
    cohort_objs = [_cohort("org"), _cohort("dept-a", "org"), _cohort("dept-b", "org")]
    preempt = {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}
    cqs = [_cq("team-a", "dept-a", 4, **preempt), _cq("team-b", "dept-b", 0, **preempt)]
    jobs = [_job(f"b{i}", "team-b", 0) for i in range(6)]
    jobs += [_job(f"a{i}", "team-a", 10) for i in range(3)]
    result = _run(cohort_objs, cqs, jobs, fair_sharing=False)
    by_key = {j.key: j for j in result.jobs}
    # team-b borrowed dept-a's 4 idle GPUs; team-a took back the 3 it asked for.
    assert [by_key[f"b{i}"].started for i in range(6)] == [0, 0, 0, 0, None, None]
    assert all(by_key[f"a{i}"].started == 10 for i in range(3))
    assert watch.admitted() == {"team-a": 3, "team-b": 1}


# -- served: statuses and messages through the API ---------------------------------------------


@pytest.fixture
def fair_kubesim(monkeypatch):
    monkeypatch.setenv("KUBESIM_FAIR_SHARING", "true")
    monkeypatch.delenv("KUBESIM_ADMISSION_FAIR_SHARING", raising=False)
    from kubernetes import config

    from kubesim.testing import running_kubesim
    from tests.kubesim.conftest import CRDS_DIR, SMALL_FLEET

    with running_kubesim(fleet=SMALL_FLEET, crds_dir=CRDS_DIR) as ks:
        api = config.new_client_from_config(ks.kubeconfig)
        yield api
        api.close()


def _workload(k8s, ns: str, name: str, *, gpus: int = 1) -> dict:
    body = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": name},
            "spec": {"queueName": "main", "podSets": [{"name": "main", "count": 1, "template": {
                "spec": {"restartPolicy": "Never", "containers": [{
                    "name": "c", "image": "x",
                    "resources": {"requests": {GPU: str(gpus)}}}]}}}]}}  # fmt: skip
    return create(k8s, "workloads", body, namespace=ns)


def _admitted(k8s, ns: str) -> list[str]:
    items = client.CustomObjectsApi(k8s).list_namespaced_custom_object(
        "kueue.x-k8s.io", "v1beta2", ns, "workloads"
    )["items"]
    return sorted(w["metadata"]["name"] for w in items
                  if (condition(w, "QuotaReserved") or {}).get("status") == "True")  # fmt: skip


def _weighted_share(k8s, name: str) -> int | None:
    status = get(k8s, "cohorts", name).get("status") or {}
    return (status.get("fairSharing") or {}).get("weightedShare")


def test_served_cohorts_report_their_share_and_preemption_names_the_whole_path(fair_kubesim):
    k8s = fair_kubesim
    v1 = client.CoreV1Api(k8s)
    create(k8s, "resourceflavors",
           {"kind": "ResourceFlavor", "metadata": {"name": FLAVOR}, "spec": {}})  # fmt: skip
    preempt = {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}
    for obj in (_cohort("org"), _cohort("dept-a", "org", weight="2"), _cohort("dept-b", "org")):
        create(k8s, "cohorts", obj)
    for cq in (_cq("team-a", "dept-a", 8, **preempt), _cq("team-b", "dept-b", 0, **preempt)):
        create(k8s, "clusterqueues", cq)
        name = cq["metadata"]["name"]
        v1.create_namespace({"metadata": {"name": name}})
        create(k8s, "localqueues", {"kind": "LocalQueue", **_lq(name)}, namespace=name)
    for i in range(8):
        _workload(k8s, "team-b", f"b{i}")
    wait_for(lambda: len(_admitted(k8s, "team-b")) == 8, message="team-b borrows all 8")
    # dept-b borrows the 8 GPUs dept-a lends the organisation: 1000 per thousand.
    wait_for(lambda: _weighted_share(k8s, "dept-b") == 1000, message="dept-b's share")
    assert _weighted_share(k8s, "dept-a") == 0 and _weighted_share(k8s, "org") == 0
    for i in range(3):
        _workload(k8s, "team-a", f"a{i}")
    wait_for(lambda: len(_admitted(k8s, "team-a")) == 3, message="team-a reclaims 3")
    assert len(_admitted(k8s, "team-b")) == 5
    wait_for(lambda: _weighted_share(k8s, "dept-b") == 625, message="dept-b's share falls")
    victims = [w for w in client.CustomObjectsApi(k8s).list_namespaced_custom_object(
        "kueue.x-k8s.io", "v1beta2", "team-b", "workloads")["items"]
        if (condition(w, "Preempted") or {}).get("status") == "True"]  # fmt: skip
    assert len(victims) == 3
    cond = condition(victims[0], "Preempted")
    assert cond["reason"] == "InCohortReclamation"
    paths = "preemptor path: /org/dept-a/team-a; preemptee path: /org/dept-b/team-b"
    assert paths in cond["message"]


def test_served_queues_below_a_cycle_admit_nothing_until_it_is_broken(fair_kubesim):
    k8s = fair_kubesim
    create(k8s, "resourceflavors",
           {"kind": "ResourceFlavor", "metadata": {"name": FLAVOR}, "spec": {}})  # fmt: skip
    create(k8s, "cohorts", _cohort("x", "y"))
    create(k8s, "cohorts", _cohort("y", "x"))
    create(k8s, "clusterqueues", _cq("cq", "x", 4))
    client.CoreV1Api(k8s).create_namespace({"metadata": {"name": "cq"}})
    create(k8s, "localqueues", {"kind": "LocalQueue", **_lq("cq")}, namespace="cq")
    _workload(k8s, "cq", "w")

    def message():
        wl = get(k8s, "workloads", "w", namespace="cq")
        return (condition(wl, "QuotaReserved") or {}).get("message")

    wait_for(lambda: message() == "ClusterQueue cq is inactive", message="inactive")
    active = wait_for(lambda: condition(get(k8s, "clusterqueues", "cq"), "Active"),
                      message="the ClusterQueue's status")  # fmt: skip
    assert (active["status"], active["reason"]) == ("False", "HasCycle")
    client.CustomObjectsApi(k8s).patch_cluster_custom_object(
        "kueue.x-k8s.io", "v1beta2", "cohorts", "y", {"spec": {"parentName": None}}
    )
    wait_for(lambda: _admitted(k8s, "cq") == ["w"], message="admitted once the cycle is gone")
