"""The replay's strategy (Buckets: workloads alike kept and tried together, plans for the quota
checks) decides what the default one (OneByOne: every workload in turn) decides: the same
admissions and evictions in the same order, the model driven directly."""

import random

import pytest

from kueuemodel.queue import OneByOne
from kueuemodel.replay.buckets import Buckets
from tests.kueuemodel.builders import cluster_queue, model_of, submit, workload

QUEUES = ("a", "b", "c")


def _history(strategy, seed: int, fair_sharing: bool) -> list[tuple]:
    rng = random.Random(seed)
    cqs = [cluster_queue(name, {"a100": (rng.randint(2, 8), rng.choice([None, 4]), None),
                                "h100": rng.randint(0, 4)})
           for name in QUEUES]  # fmt: skip
    model = model_of(cqs, flavors=("a100", "h100"), fair_sharing=fair_sharing, strategy=strategy)
    n = 0
    for _ in range(40):
        for _ in range(rng.randint(0, 4)):
            n += 1
            submit(model, workload(f"w{n}", rng.choice(QUEUES), rng.choice([1, 2, 2, 4]),
                                   priority=rng.choice([0, 0, 5, 10]),
                                   pool=rng.choice([None, None, "a100", "h100"])))  # fmt: skip
        model.schedule()
        running = sorted(k for k, wl in model.workloads.items() if wl.state == "admitted")
        for key in rng.sample(running, k=min(len(running), rng.randint(0, 3))):
            model.finish(model.workloads[key], True, "")
        model.schedule()
    return [event for event in model.listener.seen if event[0] != "pending"]


@pytest.mark.parametrize("fair_sharing", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_buckets_admit_and_evict_as_one_by_one(seed, fair_sharing):
    one_by_one = _history(OneByOne, seed, fair_sharing)
    assert any(event[0] == "evicted" for event in one_by_one)  # preemption is exercised
    assert _history(Buckets, seed, fair_sharing) == one_by_one
