"""Preemption protection rendered with Kueue's workload priority: pure functions, no I/O.

Kueue decides preemption by the Workload's priority, which it takes from the WorkloadPriorityClass
the job's `kueue.x-k8s.io/priority-class` label names; since Kueue 0.15 (kubernetes-sigs/kueue
#7289) a change of that label on a Job whose Workload holds quota updates the Workload's
priority without stopping it. (A change of a class's `value` is not passed on to Workloads,
kueue#8322, so the portal moves jobs between classes of fixed values.)

While any tier has a protection window, every tier gets a family of classes besides its own:

- `<tier>` (the tier's value V): what a job waits under, as without protection;
- `<tier>-protected`: above every tier, while the job runs within its tier's window. The
  ClusterQueues reclaim lent GPUs with `reclaimWithinCohort: LowerPriority`, so no other team
  takes them back, and nothing in the job's own queue (which preempts lower priorities only)
  preempts it either;
- `<tier>-running` (V-1): past the window, no checkpoint in this run;
- `<tier>-saved-60m`, `-saved-15m`, `-saved-5m` (V-2, V-3, V-4): past the window, saved within
  that long. Kueue takes the lowest priority first among the candidates it may preempt (then
  the most recently admitted), so the job that saved last, which loses least, goes first.

Every class a running job moves to is below V, so a waiting job of the same tier (another
team's reclaim, or its own team's queue) may still take its place once the window is over.
The tiers' values must lie at least SPACING apart so that no lowered class reaches a lower tier.
"""

from __future__ import annotations

from datetime import timedelta

from queues.manifests.common import LABEL_TIER
from queues.manifests.quotas import KUEUE_GROUP, _metadata, priority_class_name

PROTECTED = "protected"
RUNNING = "running"
# (at most this old, class suffix, value below the tier's), newest first.
SAVED_BUCKETS = (
    (timedelta(minutes=5), "saved-5m", 4),
    (timedelta(minutes=15), "saved-15m", 3),
    (timedelta(minutes=60), "saved-60m", 2),
)
RUNNING_OFFSET = 1
SPACING = 5  # tier values at least this far apart: V-4 stays above the next tier down
SUFFIX_MAX = max(len(s) for _, s, _ in SAVED_BUCKETS) + 1  # "-saved-15m"
NAME_MAX = 63 - SUFFIX_MAX  # the label value that names a class has at most 63 characters


def protection_on(tiers) -> bool:
    """Whether any tier has a protection window (then every tier gets its family of classes)."""
    return any(t.protection_minutes for t in tiers)


def reclaim_policy(tiers) -> str:
    """The ClusterQueues' reclaimWithinCohort: LowerPriority while protection is on (a protected
    job outranks every reclaimer), else Any (lent GPUs come back whatever the borrower's tier)."""
    return "LowerPriority" if protection_on(tiers) else "Any"


def protected_value(tier, tiers) -> int:
    """Above every tier's own value, in the tiers' order."""
    values = [t.value for t in tiers]
    return max(values) + 1 + (tier.value - min(values))


def class_values(tier, tiers) -> dict[str, int]:
    """The extra classes of a tier: name -> value (none while protection is off)."""
    if not protection_on(tiers):
        return {}
    base = priority_class_name(tier)
    out = {f"{base}-{RUNNING}": tier.value - RUNNING_OFFSET}
    for _, suffix, offset in SAVED_BUCKETS:
        out[f"{base}-{suffix}"] = tier.value - offset
    if tier.protection_minutes:
        out[f"{base}-{PROTECTED}"] = protected_value(tier, tiers)
    return out


def protection_class_manifests(tier, tiers, *, api_version: str = "v1beta2") -> list[dict]:
    """The tier's extra WorkloadPriorityClasses (see the module's docstring)."""
    out = []
    for name, value in class_values(tier, tiers).items():
        state = name.removeprefix(f"{priority_class_name(tier)}-")
        out.append(
            {
                "apiVersion": f"{KUEUE_GROUP}/{api_version}",
                "kind": "WorkloadPriorityClass",
                "metadata": _metadata(name, {LABEL_TIER: tier.name}),
                "value": value,
                "description": _DESCRIPTIONS[state.split("-")[0]].format(
                    tier=tier.name, minutes=tier.protection_minutes, age=state[6:]
                ),
            }
        )
    return out


_DESCRIPTIONS = {
    PROTECTED: "{tier}: within its first {minutes} minutes; not preempted",
    RUNNING: "{tier}: past its protection, no checkpoint in this run",
    "saved": "{tier}: past its protection, saved within {age}; preempted first",
}


def protected_until(tier, run_started_at):
    """When a run that started at `run_started_at` stops being protected (None: never was)."""
    if not tier.protection_minutes or run_started_at is None:
        return None
    return run_started_at + timedelta(minutes=tier.protection_minutes)


def desired_class(*, tier, tiers_protect: bool, running: bool, run_started_at, checkpoint_at,
                  now) -> str:  # fmt: skip
    """The class a job should carry now ("" = its tier's own): `running` when its Workload
    holds quota, `run_started_at` when this run began, `checkpoint_at` its latest checkpoint."""
    if not tiers_protect or not running or run_started_at is None:
        return ""
    base = priority_class_name(tier)
    until = protected_until(tier, run_started_at)
    if until is not None and now < until:
        return f"{base}-{PROTECTED}"
    if checkpoint_at is not None and checkpoint_at >= run_started_at:
        age = now - checkpoint_at
        for limit, suffix, _ in SAVED_BUCKETS:
            if age <= limit:
                return f"{base}-{suffix}"
    return f"{base}-{RUNNING}"
