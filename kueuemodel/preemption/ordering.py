"""The order preemption weighs its candidates in (Kueue's preemption/common/ordering)."""

from __future__ import annotations


def candidate_cmp(model, a, b, cq) -> int:
    """Kueue's order of preemption candidates: other queues' first; within a queue under
    admission fair sharing, the LocalQueue that used most; the lowest priority; the most
    recently admitted."""
    if (a.cq == cq.name) != (b.cq == cq.name):
        return 1 if a.cq == cq.name else -1
    if a.cq == b.cq and a.queue != b.queue and model.afs_on(model.cqs[a.cq]):
        ua, ub = model.lq_usage((a.ns, a.queue)), model.lq_usage((b.ns, b.queue))
        if ua != ub:
            return -1 if ua > ub else 1
    if a.priority != b.priority:
        return -1 if a.priority < b.priority else 1
    return b.admitted_seq - a.admitted_seq
