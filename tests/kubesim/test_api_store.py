"""The Store contract the controllers rely on: events, no-op updates, generation, conversion."""

import pytest

from kubesim import resources
from kubesim.resources import CLUSTER_QUEUES, JOBS, LOCAL_QUEUES, WORKLOADS
from kubesim.store import AlreadyExists, Conflict, NotFound, Store

WORKLOADS_V1BETA1 = resources.get("kueue.x-k8s.io", "v1beta1", "workloads")
LOCAL_QUEUES_V1BETA1 = resources.get("kueue.x-k8s.io", "v1beta1", "localqueues")


def _job(name="train"):
    return {"metadata": {"name": name, "namespace": "default"}, "spec": {"suspend": True}}


def test_subscribers_see_every_change_with_the_storage_type():
    store = Store()
    seen = []
    store.subscribe(lambda etype, rt, obj: seen.append((etype, rt, obj["metadata"]["name"])))
    store.create(JOBS, _job())
    job = store.get(JOBS, "default", "train")
    job["spec"]["suspend"] = False
    store.update(JOBS, job)
    store.delete(JOBS, "default", "train")
    assert seen == [
        ("ADDED", JOBS, "train"),
        ("MODIFIED", JOBS, "train"),
        ("DELETED", JOBS, "train"),
    ]


def test_no_op_update_keeps_the_resource_version_and_emits_nothing():
    store = Store()
    created = store.create(JOBS, _job())
    events = []
    store.subscribe(lambda *event: events.append(event))
    again = store.update(JOBS, store.get(JOBS, "default", "train"))
    assert again["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert events == []


def test_generation_follows_spec_not_status():
    store = Store()
    store.create(JOBS, _job())
    job = store.get(JOBS, "default", "train")
    job["status"] = {"active": 1}
    store.update(JOBS, job, subresource="status")
    assert store.get(JOBS, "default", "train")["metadata"]["generation"] == 1
    job = store.get(JOBS, "default", "train")
    job["spec"]["suspend"] = False
    job["status"] = {"active": 5}
    store.update(JOBS, job)
    stored = store.get(JOBS, "default", "train")
    assert stored["metadata"]["generation"] == 2
    assert stored["status"] == {"active": 1}  # the main resource does not write status
    job = store.get(JOBS, "default", "train")
    job["spec"]["parallelism"] = 2
    job["status"] = {"active": 2}
    store.update(JOBS, job, subresource="all")
    stored = store.get(JOBS, "default", "train")
    assert (stored["metadata"]["generation"], stored["status"]) == (3, {"active": 2})


def test_errors():
    store = Store()
    store.create(JOBS, _job())
    with pytest.raises(AlreadyExists):
        store.create(JOBS, _job())
    with pytest.raises(NotFound):
        store.get(JOBS, "default", "nope")
    with pytest.raises(NotFound):
        store.create(JOBS, {"metadata": {"name": "x", "namespace": "nowhere"}})
    stale = store.get(JOBS, "default", "train")
    fresh = store.get(JOBS, "default", "train")
    fresh["spec"]["suspend"] = False
    store.update(JOBS, fresh)
    stale["spec"]["parallelism"] = 3
    with pytest.raises(Conflict):
        store.update(JOBS, stale)
    store.update(JOBS, stale, check_rv=False)


def test_workload_priority_class_conversion_round_trips():
    store = Store()
    store.create(
        WORKLOADS_V1BETA1,
        {
            "metadata": {"name": "w", "namespace": "default"},
            "spec": {
                "queueName": "q",
                "priorityClassName": "gold",
                "priority": 100,
                "priorityClassSource": "kueue.x-k8s.io/workloadpriorityclass",
            },
        },
    )
    v2 = store.get(WORKLOADS, "default", "w")
    assert v2["spec"]["priorityClassRef"] == {
        "group": "kueue.x-k8s.io",
        "kind": "WorkloadPriorityClass",
        "name": "gold",
    }
    assert "priorityClassName" not in v2["spec"]
    v1 = store.get(WORKLOADS_V1BETA1, "default", "w")
    assert v1["spec"]["priorityClassName"] == "gold"
    assert v1["spec"]["priorityClassSource"] == "kueue.x-k8s.io/workloadpriorityclass"
    assert v1["apiVersion"] == "kueue.x-k8s.io/v1beta1"


def test_local_queue_status_conversion():
    store = Store()
    store.create(
        LOCAL_QUEUES,
        {"metadata": {"name": "lq", "namespace": "default"}, "spec": {"clusterQueue": "cq"}},
    )
    lq = store.get(LOCAL_QUEUES, "default", "lq")
    lq["status"] = {"flavorsUsage": [{"name": "a100", "resources": []}]}
    store.update(LOCAL_QUEUES, lq, subresource="status")
    v1 = store.get(LOCAL_QUEUES_V1BETA1, "default", "lq")
    assert v1["status"] == {"flavorUsage": [{"name": "a100", "resources": []}]}


def test_snapshot_restore_keeps_objects_and_the_counter(tmp_path):
    store = Store()
    created = store.create(CLUSTER_QUEUES, {"metadata": {"name": "cq"}, "spec": {}})
    store.save(tmp_path / "state.json")
    again = Store()
    assert again.load(tmp_path / "state.json")
    assert again.get(CLUSTER_QUEUES, None, "cq")["metadata"]["uid"] == created["metadata"]["uid"]
    assert again.resource_version() == store.resource_version()
    assert not Store().load(tmp_path / "missing.json")
