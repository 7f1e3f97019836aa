"""kueuemodel.estimate: when a workload waiting now would be admitted, from what the queues of a
cohort hold and when each admitted workload ends."""

import random

import pytest

from kueuemodel.estimate import Forecast, Holding
from tests.kueuemodel.builders import cluster_queue, model_of, submit, workload


def _forecast(queue, *holding, vision=(8, 4, None), nlp=(4, 0, None), fair_sharing=False):
    return Forecast(queue=queue, cluster_queues=[cluster_queue("vision", {"a100": vision}),
                                                 cluster_queue("nlp", {"a100": nlp})],
                    holding=list(holding), fair_sharing=fair_sharing)  # fmt: skip


def test_a_queue_at_its_borrowing_limit_waits_for_its_own_workloads_not_the_lenders():
    """vision holds 12 (its 8 and the 4 it may borrow); nlp's 4 ending first give vision no
    more room."""
    holding = [Holding("vision", "a100", 8, 300), Holding("vision", "a100", 4, 600),
               Holding("nlp", "a100", 4, 100)]  # fmt: skip
    forecast = _forecast("vision", *holding)
    assert (forecast.ceiling(), forecast.free()) == (12, 0)
    assert [forecast.start(gpus) for gpus in (12, 4, 8, 16)] == [600, 300, 300, None]


def test_borrowing_waits_for_the_lenders_quota_to_be_idle():
    forecast = _forecast("vision", Holding("nlp", "a100", 4, 200))
    assert forecast.free() == 8
    assert (forecast.start(8), forecast.start(12)) == (0, 200)


def test_a_queue_within_its_quota_takes_back_what_others_borrow_at_once():
    forecast = _forecast("nlp", Holding("vision", "a100", 12, 5000))
    assert forecast.free() == 0
    assert forecast.start(4) == 0
    assert forecast.start(5) is None  # nlp may not borrow


def test_a_lending_limit_keeps_quota_for_its_owner():
    """nlp lends at most 1 of its 4: vision reaches 9 at most, and nlp's 3 stay its own."""
    assert _forecast("vision", vision=(8, None, None), nlp=(4, None, 1)).ceiling() == 9
    busy = _forecast("nlp", Holding("vision", "a100", 9, 700), vision=(8, None, None),
                     nlp=(4, None, 1))  # fmt: skip
    assert busy.free() == 3 and busy.start(4) == 0  # the 1 it lent is taken back


def test_the_queue_asked_about_need_not_exist():
    forecast = _forecast("nobody", Holding("nlp", "a100", 4, 200))
    assert forecast.start(1) is None and forecast.ceiling() == 0


@pytest.mark.parametrize("fair_sharing", [False, True])
@pytest.mark.parametrize("seed", range(30))
def test_the_forecast_admits_when_the_models_own_cycle_does(seed, fair_sharing):
    """Against the model run moment by moment with the workload queued: the same start for
    every size, whichever order the sizes are asked in (with fair sharing, whose preemption
    is not monotone in size, too)."""
    rng = random.Random(seed)
    quotas = {name: (rng.randint(0, 8), rng.choice([None, 0, 4]), rng.choice([None, 2]))
              for name in ("a", "b", "c")}  # fmt: skip
    cqs = [cluster_queue(name, {"a100": q}) for name, q in quotas.items()]
    holding = [Holding(rng.choice("abc"), "a100", rng.randint(1, 4), rng.randint(0, 5) * 100)
               for _ in range(rng.randint(2, 8))]  # fmt: skip
    forecast = Forecast(queue="a", cluster_queues=cqs, holding=holding, fair_sharing=fair_sharing)
    sizes = list(range(1, 14))
    rng.shuffle(sizes)
    for size in sizes:
        assert forecast.start(size) == _cycle(cqs, holding, size, fair_sharing), size


def _cycle(cqs, holding, size, fair_sharing):
    model = model_of(cqs, fair_sharing=fair_sharing)
    held = []
    for i, h in enumerate(holding):
        wl = workload(f"h{i}", h.queue, h.gpus)
        model.workloads[wl.key] = wl
        model.admit(wl, model.cqs[h.queue], [{"nvidia.com/gpu": "a100"}])
        held.append((h.ends, wl))
    (waiting,) = submit(model, workload("waiting", "a", size))
    model.schedule()
    for end in [0, *sorted({h.ends for h in holding})]:
        for ends, wl in held:
            if ends == end and wl.state == "admitted":
                model.finish(wl, True, "")
        if waiting.state == "admitted":
            return end
        model.schedule()
        if waiting.state == "admitted":
            return end
    return None
