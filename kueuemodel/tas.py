"""Kueue's topology-aware scheduling (TAS), as kubesim's Kueue engine applies it.

A ResourceFlavor with `spec.topologyName` names a Topology: node labels from the widest level
(a block) to the narrowest (a rack, or the node itself). A pod set whose template asks for
`kueue.x-k8s.io/podset-required-topology: <label>` is admitted only where all its pods fit in one
domain of that level; `podset-preferred-topology` tries that level, then each wider one, and at
last spreads over the fewest domains. The admission records the placement per lowest-level
domain (`topologyAssignment`); the pods are created gated (`kueue.x-k8s.io/topology`) and
ungated one by one with a node selector for their domain, so the scheduler puts them there.

Capacity per domain is what its nodes can allocate less what pods outside TAS hold and what
admitted TAS workloads were assigned. As in Kueue, a lowest level other than the hostname is
treated as one bin (the sum of its nodes); not modelled: preemption to make room for a
topology, slices (podset-slice-*), and unconstrained TAS for pod sets that ask for nothing.
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict

from kueuemodel.resources import pod_requests, to_units
from kueuemodel.selectors import untolerated

TOPOLOGY_GATE = "kueue.x-k8s.io/topology"
TAS_LABEL = "kueue.x-k8s.io/tas"
REQUIRED_ANNOTATION = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_ANNOTATION = "kueue.x-k8s.io/podset-preferred-topology"
HOSTNAME = "kubernetes.io/hostname"
INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
_TERMINAL = ("Succeeded", "Failed")

Leaf = tuple[str, ...]


def topology_request(template: dict) -> dict | None:
    """The Workload podSet topologyRequest a pod template asks for, or None."""
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    if annotations.get(REQUIRED_ANNOTATION):
        return {"required": annotations[REQUIRED_ANNOTATION], "podIndexLabel": INDEX_LABEL}
    if annotations.get(PREFERRED_ANNOTATION):
        return {"preferred": annotations[PREFERRED_ANNOTATION], "podIndexLabel": INDEX_LABEL}
    return None


def gate_pod(pod_spec: dict, labels: dict) -> None:
    """What Kueue's pod webhook does to a pod of a TAS pod set: gate it until it is placed."""
    gates = pod_spec.setdefault("schedulingGates", [])
    if not any(g.get("name") == TOPOLOGY_GATE for g in gates):
        gates.append({"name": TOPOLOGY_GATE})
    labels[TAS_LABEL] = "true"


class Capacity:
    """Nodes and what pods outside TAS hold on them (TAS pods are counted by assignment)."""

    def __init__(self):
        self.nodes: dict[str, dict] = {}  # name -> {labels, allocatable, taints, ok}
        self.pods: dict[tuple[str, str], tuple[str, dict[str, int]]] = {}
        self.used: dict[str, Counter] = defaultdict(Counter)

    def on_node(self, etype: str, obj: dict) -> bool:
        meta, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
        if etype == "DELETED":
            return self.nodes.pop(meta["name"], None) is not None
        allocatable = {}
        for res, value in (status.get("allocatable") or status.get("capacity") or {}).items():
            try:
                allocatable[res] = to_units(res, value)
            except ValueError:
                continue
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions") or []
        )
        info = {
            "labels": dict(meta.get("labels") or {}),
            "allocatable": allocatable,
            "taints": list(spec.get("taints") or []),
            "ok": ready and not spec.get("unschedulable"),
        }
        changed = self.nodes.get(meta["name"]) != info
        self.nodes[meta["name"]] = info
        return changed

    def on_pod(self, etype: str, obj: dict) -> bool:
        """Track a pod outside TAS; True when the free capacity of some node changed."""
        meta, spec = obj["metadata"], obj.get("spec") or {}
        key = (meta.get("namespace", ""), meta["name"])
        live = (
            etype != "DELETED"
            and (obj.get("status") or {}).get("phase") not in _TERMINAL
            and spec.get("nodeName")
            and (meta.get("labels") or {}).get(TAS_LABEL) != "true"
        )
        old = self.pods.pop(key, None)
        if old is not None:
            self.used[old[0]].subtract(old[1])
        if live:
            entry = (spec["nodeName"], pod_requests(spec))
            self.pods[key] = entry
            self.used[entry[0]].update(entry[1])
            return old != entry
        return old is not None

    def leaves(self, levels: list[str], node_labels: dict, tolerations: list[dict]) -> dict:
        """Free resources per lowest-level domain, over the nodes a flavor selects."""
        free: dict[Leaf, Counter] = defaultdict(Counter)
        for name, info in self.nodes.items():
            labels = info["labels"]
            if not info["ok"] or any(labels.get(k) != v for k, v in node_labels.items()):
                continue
            if any(level not in labels for level in levels):
                continue
            if untolerated(info["taints"], tolerations):
                continue
            leaf = tuple(labels[level] for level in levels)
            for res, units in info["allocatable"].items():
                free[leaf][res] += units - self.used[name].get(res, 0)
        return free

    def node_leaf(self, levels: list[str], hostname: str) -> Leaf | None:
        labels = (self.nodes.get(hostname) or {}).get("labels") or {}
        if any(level not in labels for level in levels):
            return None
        return tuple(labels[level] for level in levels)


def fits(free: Counter, per_pod: dict[str, int]) -> int:
    """How many pods with these requests fit in free resources."""
    wanted = {res: units for res, units in per_pod.items() if units > 0}
    if not wanted:
        return 1 << 30
    return max(0, min(free.get(res, 0) // units for res, units in wanted.items()))


def place(
    levels: list[str], fit: dict[Leaf, int], count: int, request: dict
) -> tuple[dict[Leaf, int] | None, int]:
    """Pods per lowest-level domain for a pod set, or (None, the most that would fit)."""
    if "required" in request:
        tries, spread = [levels.index(request["required"])], False
    else:
        tries, spread = list(range(levels.index(request["preferred"]), -1, -1)), True
    best = 0
    for depth in tries:
        domains = _group(fit, depth + 1)
        best = max([best, *domains.values()])
        fitting = [d for d, n in domains.items() if n >= count]
        if fitting:
            chosen = min(fitting, key=lambda d: (domains[d], d))
            inside = {leaf: n for leaf, n in fit.items() if leaf[: depth + 1] == chosen}
            return _fill(inside, count, depth + 1), count
    total = sum(fit.values())
    if spread and total >= count:
        return _fill(fit, count, 0), count
    return None, total if spread else best


def _group(fit: dict[Leaf, int], length: int) -> dict[Leaf, int]:
    out: dict[Leaf, int] = defaultdict(int)
    for leaf, n in fit.items():
        out[leaf[:length]] += n
    return out


def _fill(fit: dict[Leaf, int], count: int, depth: int) -> dict[Leaf, int]:
    """Spread count pods over the leaves below one domain, in as few sub-domains as possible:
    one that holds them all (the tightest), else the largest first and the tightest for the
    rest (Kueue's BestFit)."""
    leaf_depth = len(next(iter(fit)))
    if depth >= leaf_depth:
        ((leaf, _),) = fit.items()
        return {leaf: count}
    children = _group(fit, depth + 1)
    out: dict[Leaf, int] = {}
    remaining = count
    order = sorted(children, key=lambda d: (-children[d], d))
    while remaining > 0 and order:
        holding = [d for d in order if children[d] >= remaining]
        child = min(holding, key=lambda d: (children[d], d)) if holding else order[0]
        take = min(remaining, children[child])
        order.remove(child)
        if take <= 0:
            continue
        inside = {leaf: n for leaf, n in fit.items() if leaf[: depth + 1] == child}
        out.update(_fill(inside, take, depth + 1))
        remaining -= take
    return out


def assignment_levels(levels: list[str]) -> list[str]:
    """The levels a topologyAssignment names: only the hostname when it is the lowest level."""
    return [HOSTNAME] if levels and levels[-1] == HOSTNAME else list(levels)


def topology_assignment(levels: list[str], plan: dict[Leaf, int]) -> dict:
    """The v1beta2 Workload admission's topologyAssignment (one slice, values per level)."""
    out_levels = assignment_levels(levels)
    skip = len(levels) - len(out_levels)
    leaves = sorted(plan)
    counts = [plan[leaf] for leaf in leaves]
    return {
        "levels": out_levels,
        "slices": [
            {
                "domainCount": len(leaves),
                "podCounts": _compact_counts(counts),
                "valuesPerLevel": [
                    _compact_values([leaf[skip + i] for leaf in leaves])
                    for i in range(len(out_levels))
                ],
            }
        ],
    }


def _compact_counts(counts: list[int]) -> dict:
    """Kueue's compact form: one `universal` count when all are alike."""
    if len(set(counts)) == 1:
        return {"universal": counts[0]}
    return {"individual": counts}


def _compact_values(values: list[str]) -> dict:
    """Kueue's compact form of a level's values: one `universal` value when all are alike, else
    the roots without their common `prefix` and `suffix`."""
    if len(set(values)) == 1:
        return {"universal": values[0]}
    prefix = os.path.commonprefix(values)
    rest = [v[len(prefix) :] for v in values]
    suffix = os.path.commonprefix([v[::-1] for v in rest])[::-1]
    roots = [v[: len(v) - len(suffix)] for v in rest]
    out: dict = {"roots": roots}
    if prefix:
        out["prefix"] = prefix
    if suffix:
        out["suffix"] = suffix
    return {"individual": out}


def read_assignment(assignment: dict, levels: list[str], capacity: Capacity) -> dict[Leaf, int]:
    """A topologyAssignment back into pods per leaf (restoring a saved state)."""
    out_levels = assignment.get("levels") or []
    plan: dict[Leaf, int] = {}
    for piece in assignment.get("slices") or []:
        n = int(piece.get("domainCount") or 0)
        counts = (piece.get("podCounts") or {}).get("individual") or [
            (piece.get("podCounts") or {}).get("universal", 0)
        ] * n
        values = []
        for level in piece.get("valuesPerLevel") or []:
            if "universal" in level:
                values.append([level["universal"]] * n)
            else:
                each = level.get("individual") or {}
                pre, post = each.get("prefix", ""), each.get("suffix", "")
                values.append([f"{pre}{root}{post}" for root in each.get("roots") or []])
        for i in range(n):
            domain = tuple(v[i] for v in values if i < len(v))
            if out_levels == [HOSTNAME] and levels != [HOSTNAME]:
                leaf = capacity.node_leaf(levels, domain[0]) if domain else None
            else:
                leaf = domain
            if leaf:
                plan[leaf] = plan.get(leaf, 0) + int(counts[i] if i < len(counts) else 0)
    return plan


def selector_for(levels: list[str], leaf: Leaf) -> dict[str, str]:
    """The node selector that keeps a pod in its assigned domain."""
    out_levels = assignment_levels(levels)
    skip = len(levels) - len(out_levels)
    return {label: leaf[skip + i] for i, label in enumerate(out_levels)}
