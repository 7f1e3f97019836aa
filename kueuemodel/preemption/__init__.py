"""Preemption (Kueue's pkg/scheduler/preemption): when a workload does not fit, which admitted
workloads to evict so that it does, per its ClusterQueue's policies: classical
(kueuemodel.preemption.classical: `withinClusterQueue`, `reclaimWithinCohort`) or, with fair
sharing on, by dominant resource share alone (kueuemodel.preemption.fairsharing, as Kueue)."""

from __future__ import annotations

from kueuemodel import cohorts
from kueuemodel.preemption import classical, fairsharing


def find_victims(model, wl, cq) -> tuple[list, list[dict[str, str]] | None]:
    """A minimal set of admitted workloads whose eviction lets wl fit, per Kueue's policies
    (under fair sharing, its fair-sharing preemption alone, as in Kueue), and wl's flavors
    then; ([], None) when there is none. A workload evicted in this cycle preempts nothing."""
    model.refused = False
    if wl.key in model.evicted_now:
        return [], None
    if model.fair_sharing:
        return fairsharing.victims(model, wl, cq)
    return classical.victims(model, wl, cq)


def preempt(model, preemptor, cq, victims: list) -> None:
    """Evict the victims, each with Kueue's Preempted condition and message."""
    path = cohorts.path_name(cq)
    for victim in victims:
        model.preemptions += 1
        vpath = cohorts.path_name(model.cqs[victim.cq])
        if victim.cq == cq.name:
            why, reason = "prioritization in the ClusterQueue", "InClusterQueue"
        elif victim.fair_victim:
            why, reason = "Fair Sharing within the cohort", "InCohortFairSharing"
        else:
            why, reason = "reclamation within the cohort", "InCohortReclamation"
        message = (
            f"Preempted to accommodate a workload (UID: {preemptor.uid}, JobUID: "
            f"{preemptor.job_uid or 'UNKNOWN'}) due to {why}; preemptor path: {path}; "
            f"preemptee path: {vpath}; preemptor: {preemptor.ns}/{preemptor.name}"
        )
        victim.fair_victim = False
        model.evicted_now.add(victim.key)
        model.evict(victim, "Preempted", message, preempted_reason=reason)
