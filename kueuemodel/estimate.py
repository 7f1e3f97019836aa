"""When would a workload waiting now be admitted: a small simulation of one cluster's queues
over the model, from the workloads admitted now and when each gives its quota back.

The ClusterQueues (and Cohorts) are Kueue objects as the cluster has them; each admitted
workload holds GPUs of one flavor in its queue until it ends. Nothing else arrives meanwhile,
so until the workload asked about is admitted, the model at each moment is the workloads still
running then; at each moment (now, then each end) the model is asked what its scheduling cycle
would do with a workload of the queue: admit it as it fits, or by preemption where the queues'
policies allow, or not. Every workload counts as the same priority (the caller does not know the
waiting one's), so preemption only takes back what other queues borrow.

One forecast answers any size, simulating the moments only as far as the sizes asked need: at
each moment, the sizes that fit are found by bisection (more GPUs never fit where fewer do not),
and so are those preemption admits, as a smaller workload finds victims wherever a larger one
does; with fair sharing on, Kueue's preemption strategies can refuse a workload that a larger
one would pass, so there each size that does not fit, up to the largest that would have room
were everything it may preempt evicted, is asked of the model in turn.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from kueuemodel.model import Model
from kueuemodel.preemption import fairsharing
from kueuemodel.resources import GPU
from kueuemodel.types import ADMITTED, WL, PodSet

FLAVOR_LABEL = "estimate.kueuemodel/flavor"  # the node label that tells the flavors apart


@dataclass(frozen=True)
class Holding:
    """A workload admitted now: `gpus` of `flavor` in ClusterQueue `queue` for `ends` more
    seconds (a forecast takes them in the order they were admitted)."""

    queue: str
    flavor: str
    gpus: int
    ends: float


class _Clock:
    def __init__(self):
        self.t = 0.0

    def timestamp(self) -> float:
        return self.t


class Forecast:
    """When a workload of one ClusterQueue (`queue`) would be admitted, among the queues of one
    cluster and what their admitted workloads hold."""

    def __init__(
        self, *, queue: str, cluster_queues: list[dict], cohorts: list[dict] = (),
        holding: list[Holding] = (), fair_sharing: bool = False,
    ):  # fmt: skip
        self.queue = queue
        self.model = model = Model(clock=_Clock(), fair_sharing=fair_sharing)
        names = {fl["name"] for obj in cluster_queues
                 for rg in (obj.get("spec") or {}).get("resourceGroups") or []
                 for fl in rg.get("flavors") or []}  # fmt: skip
        for name in sorted(names):
            model.set_flavor(name, {"metadata": {"name": name},
                                    "spec": {"nodeLabels": {FLAVOR_LABEL: name}}})  # fmt: skip
        for obj in cohorts:
            model.set_cohort(obj["metadata"]["name"], obj)
        for obj in cluster_queues:
            name = obj["metadata"]["name"]
            model.set_cluster_queue(name, obj)
            # One LocalQueue per ClusterQueue, in a namespace of the queue's name.
            model.set_local_queue((name, "main"), {"metadata": {"name": "main", "namespace": name},
                                                   "spec": {"clusterQueue": name}})  # fmt: skip
        model.rebuild()
        # Admitted in the order given (their admission's: preemption takes the newest first),
        # ending in the order of their ends.
        self.ends: list[tuple[float, WL]] = []
        for i, held in enumerate(holding):
            wl = _workload(f"holding-{i}", held.queue, held.gpus, held.flavor)
            model.workloads[wl.key] = wl
            cq, _ = model.target(wl)
            if cq is not None:
                model.admit(wl, cq, [{GPU: held.flavor}])
            self.ends.append((held.ends, wl))
        self.ends.sort(key=lambda end: end[0])
        self.cq = model.cqs.get(queue)
        self.most = self.ceiling()
        self.free_now = self.free()
        # The moments simulated so far; up to what size everything is admitted at each (the
        # running largest, so that the first moment a size is admitted is a bisection); and the
        # larger sizes admitted there all the same (fair-sharing preemption only).
        self.moments: list[float] = []
        self.reach: list[int] = []
        self.beyond: list[set[int]] = []
        self.ended = 0  # how many of self.ends are past

    def ceiling(self) -> int:
        """The most GPUs a workload of the queue could get in one flavor, with nothing else
        admitted (its nominal quota and what it may borrow)."""
        if self.cq is None:
            return 0
        return max((self.model.capacity(self.cq, f, GPU) for f in self.cq.flavor_names),
                   default=0)  # fmt: skip

    def free(self) -> int:
        """The most GPUs a workload of the queue could get now in one flavor."""
        if self.cq is None:
            return 0
        return max((self.model.available(self.cq, f, GPU) for f in self.cq.flavor_names),
                   default=0)  # fmt: skip

    def start(self, gpus: int) -> float | None:
        """Seconds from now until a workload of `gpus` GPUs queued in the queue (in the first of
        its flavors that has room) is admitted; None when it is not even once every admitted
        workload has ended."""
        if self.cq is None or gpus > self.most:
            return None
        while True:
            at = bisect.bisect_left(self.reach, gpus)
            for i in range(at):
                if gpus in self.beyond[i]:
                    return self.moments[i]
            if at < len(self.reach):
                return self.moments[at]
            if not self._advance():
                return None

    def _advance(self) -> bool:
        """Simulate the next moment (now, then each end); False when none is left."""
        model, ends = self.model, self.ends
        if self.moments:
            if self.ended >= len(ends):
                return False
            moment = model.clock.t = ends[self.ended][0]
            while self.ended < len(ends) and ends[self.ended][0] == moment:
                done = ends[self.ended][1]
                if done.state == ADMITTED:
                    model.finish(done, True, "")
                self.ended += 1
        fits = self._largest(0, self._fits)
        if model.fair_sharing:
            upto, room = fits, self._largest(fits, self._has_room)
            beyond = {size for size in range(fits + 1, room + 1) if self._preempts(size)}
        else:
            upto, beyond = self._largest(fits, self._preempts), set()
        self.moments.append(model.clock.t)
        self.reach.append(max(upto, self.reach[-1] if self.reach else 0))
        self.beyond.append(beyond)
        return True

    def _largest(self, lo: int, admitted) -> int:
        """The largest size in [lo, the ceiling] that `admitted` holds for (lo when none does),
        by bisection."""
        hi = self.most
        while lo < hi:
            size = (lo + hi + 1) // 2
            if admitted(size):
                lo = size
            else:
                hi = size - 1
        return lo

    def _fits(self, gpus: int) -> bool:
        """Whether a workload of `gpus` GPUs of the queue fits now."""
        return (
            self.model.assign(_workload("waiting", self.queue, gpus, None), self.cq)[0] is not None
        )

    def _has_room(self, gpus: int) -> bool:
        """Whether a workload of `gpus` GPUs of the queue would fit were everything it may
        preempt under fair sharing evicted (no size above the largest that has can preempt)."""
        return fairsharing.has_room(
            self.model, _workload("waiting", self.queue, gpus, None), self.cq
        )

    def _preempts(self, gpus: int) -> bool:
        """Whether the model's cycle would admit a workload of `gpus` GPUs of the queue now,
        fitting or by preemption (the model is left as it was)."""
        wl = _workload("waiting", self.queue, gpus, None)
        if self.model.assign(wl, self.cq)[0] is not None:
            return True
        return bool(self.model.find_victims(wl, self.cq)[0])


def _workload(name: str, queue: str, gpus: int, flavor: str | None) -> WL:
    """A workload of one pod of `gpus` GPUs in the queue's LocalQueue (of `flavor`, if set)."""
    spec = {"nodeSelector": {FLAVOR_LABEL: flavor}} if flavor else {}
    return WL(ns=queue, name=name, uid=name, queue="main", priority=0, created=name, seq=0,
              podsets=[PodSet("main", 1, {GPU: gpus}, spec)])  # fmt: skip
