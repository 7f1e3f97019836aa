"""Cohort trees: Kueue's quota arithmetic over hierarchical cohorts, and its dominant resource
share.

Every ClusterQueue and Cohort is a node with, per (flavor, resource):
- `subtree`: its nominal quota plus what its children can lend it (a child lends its subtree
  quota less its local quota);
- `local`: the part of its subtree quota it never lends (subtree − lendingLimit, with a
  lendingLimit; otherwise none);
- `usage`: for a ClusterQueue what its admitted workloads hold, for a Cohort what its
  children use beyond their local quota;
- `limit`: its borrowingLimit (None: unlimited).

A workload fits a ClusterQueue when it asks for no more than `available` (its unused local quota
plus what its parent can still give, capped by the borrowing limit at each level) and no more
than `potential` (the same with nothing used). A Cohort whose parent is missing has an implicit
parent without quota, and a ClusterQueue whose cohort is missing an implicit cohort, as in Kueue.
The names are the Cohort objects' and ClusterQueues' own; the formulas are those of Kueue's
resource nodes (`pkg/cache/scheduler/resource_node.go`, `fair_sharing.go`), written again here.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from kueuemodel.resources import parse_quantity, to_units

MAX_SHARE = 2**63 - 1  # the weightedShare of a zero weight that borrows (Kueue's MaxInt64)


def parse_weight(spec: dict | None) -> float:
    """`spec.fairSharing.weight` as a number (Kueue's default 1)."""
    try:
        return float(parse_quantity(((spec or {}).get("fairSharing") or {}).get("weight", 1)))
    except (TypeError, ValueError):
        return 1.0


def quotas_of(spec: dict) -> dict[tuple[str, str], tuple[int, int | None, int | None]]:
    """(flavor, resource) -> (nominal, borrowingLimit, lendingLimit) in units, from a
    ClusterQueue's or Cohort's `resourceGroups`."""
    out = {}
    for rg in spec.get("resourceGroups") or []:
        for fl in rg.get("flavors") or []:
            for r in fl.get("resources") or []:
                name = r["name"]
                out[(fl["name"], name)] = (
                    to_units(name, r.get("nominalQuota", 0)),
                    None if r.get("borrowingLimit") is None
                    else to_units(name, r["borrowingLimit"]),
                    None if r.get("lendingLimit") is None else to_units(name, r["lendingLimit"]),
                )  # fmt: skip
    return out


@dataclass(eq=False)
class Cohort:
    """One Cohort of a tree (an object of that name, or implied by a reference to it)."""

    name: str
    parent_name: str | None = None
    weight: float = 1.0
    quotas: dict = field(default_factory=dict)  # see quotas_of
    parent: Cohort | None = None
    child_cohorts: list = field(default_factory=list)  # by name
    child_cqs: list = field(default_factory=list)  # by name
    subtree: dict = field(default_factory=dict)
    local: dict = field(default_factory=dict)
    limit: dict = field(default_factory=dict)
    usage: defaultdict = field(default_factory=lambda: defaultdict(int))
    # What a child's share is measured against, per resource: the sum over the tree's
    # (flavor, resource) pairs of what could ever reach this Cohort (Kueue's lendable).
    lendable: dict = field(default_factory=dict)
    cycle: bool = False  # on a cycle of parents, or below one: its queues admit nothing
    depth: int = 0  # 0 for a root

    @property
    def root(self) -> Cohort:
        node = self
        while node.parent is not None:
            node = node.parent
        return node

    def path(self) -> list[Cohort]:
        """This Cohort and its ancestors, up to the root."""
        out, node = [], self
        while node is not None:
            out.append(node)
            node = node.parent
        return out

    def subtree_cqs(self) -> list:
        """The ClusterQueues anywhere below, children first, then each child Cohort's."""
        out = list(self.child_cqs)
        for child in self.child_cohorts:
            out.extend(child.subtree_cqs())
        return out


def build(cqs: dict, cohort_objs: dict[str, dict]) -> dict[str, Cohort]:
    """The Cohort trees of the ClusterQueues (`cqs`: name -> CQ, whose `cohort`, `quotas`,
    `subtree`, `local` and `limit` are set; each gets `parent`) and the Cohort objects.
    Returns every Cohort by name, its quota worked out; usage is left at zero."""
    nodes: dict[str, Cohort] = {}

    def node(name: str) -> Cohort:
        found = nodes.get(name)
        if found is None:
            spec = (cohort_objs.get(name) or {}).get("spec") or {}
            found = nodes[name] = Cohort(
                name, spec.get("parentName") or None, parse_weight(spec), quotas_of(spec)
            )
        return found

    for name in cohort_objs:
        node(name)
    for cq in cqs.values():
        cq.parent = node(cq.cohort) if cq.cohort else None
    for name in list(nodes):  # a parent implied by a reference has no parent of its own
        co = nodes[name]
        if co.parent_name:
            co.parent = node(co.parent_name)
    # A Cohort on a cycle of parents, or below one, is cut off: its queues admit nothing.
    for co in nodes.values():
        seen, walker = set(), co
        while walker is not None and walker.name not in seen:
            seen.add(walker.name)
            walker = walker.parent
        co.cycle = walker is not None  # came back to a Cohort already on the way up
    for co in nodes.values():
        if co.cycle:
            co.parent = None
    for co in sorted(nodes.values(), key=lambda c: c.name):
        if co.parent is not None:
            co.parent.child_cohorts.append(co)
    for cq in sorted(cqs.values(), key=lambda c: c.name):
        if cq.parent is not None:
            cq.parent.child_cqs.append(cq)
    for co in nodes.values():
        if not co.cycle and co.parent is None:
            _mark_depth(co, 0)
            _sum_subtree(co)
            _lendable(co, co)
    return nodes


def _mark_depth(co: Cohort, depth: int) -> None:
    co.depth = depth
    for child in co.child_cohorts:
        _mark_depth(child, depth + 1)


def _sum_subtree(co: Cohort) -> None:
    """A Cohort's subtree quota: its own nominal quota plus each child's subtree quota less
    the child's local quota (what the child keeps)."""
    co.subtree = {fr: q[0] for fr, q in co.quotas.items()}
    for child in co.child_cohorts:
        _sum_subtree(child)
    for child in [*co.child_cohorts, *co.child_cqs]:
        for fr, quota in child.subtree.items():
            co.subtree[fr] = co.subtree.get(fr, 0) + quota - child.local.get(fr, 0)
    co.local = {}
    co.limit = {}
    for fr, (_, borrowing, lending) in co.quotas.items():
        if lending is not None:
            co.local[fr] = max(0, co.subtree.get(fr, 0) - lending)
        if borrowing is not None:
            co.limit[fr] = borrowing


def _lendable(co: Cohort, root: Cohort) -> None:
    lendable: dict[str, int] = defaultdict(int)
    for fr in root.subtree:
        lendable[fr[1]] += potential(co, fr)
    co.lendable = dict(lendable)
    for child in co.child_cohorts:
        _lendable(child, root)


# -- the arithmetic, for a ClusterQueue or a Cohort alike ------------------------------------


def available(node, fr: tuple[str, str]) -> int:
    """What the node could still use of (flavor, resource): its unused local quota and what
    its parent can give, within its borrowing limit (may be negative when quota shrank below
    usage; a ClusterQueue's caller takes max(0, …))."""
    parent = node.parent
    if parent is None:
        return node.subtree.get(fr, 0) - node.usage[fr]
    local = node.local.get(fr, 0)
    used = node.usage[fr]
    from_parent = available(parent, fr)
    limit = node.limit.get(fr)
    if limit is not None:
        from_parent = min(node.subtree.get(fr, 0) - local - max(0, used - local) + limit,
                          from_parent)  # fmt: skip
    return max(0, local - used) + from_parent


def potential(node, fr: tuple[str, str]) -> int:
    """The most the node could ever use of (flavor, resource), with nothing else used."""
    parent = node.parent
    if parent is None:
        return node.subtree.get(fr, 0)
    most = node.local.get(fr, 0) + potential(parent, fr)
    limit = node.limit.get(fr)
    if limit is not None:
        most = min(node.subtree.get(fr, 0) + limit, most)
    return most


def add_usage(node, fr: tuple[str, str], units: int) -> None:
    """Add (or, negative, take off) usage at the node; what goes beyond (or came back within)
    its local quota moves up to its parent, and so on."""
    while True:
        local = node.local.get(fr, 0)
        before = node.usage[fr]
        after = before + units
        node.usage[fr] = after
        node = node.parent
        if node is None:
            return
        units = max(0, after - local) - max(0, before - local)
        if not units:
            return


# -- dominant resource share -----------------------------------------------------------------


@dataclass(frozen=True)
class Share:
    """A node's dominant resource share: per resource, what it uses beyond its subtree quota
    per thousand of what its parent can lend (the largest), and its weight."""

    ratio: float = 0.0
    weight: float = 1.0
    borrowing: bool = False
    borrowed: frozenset = frozenset()  # the (flavor, resource) pairs it borrows

    @property
    def key(self) -> tuple[int, float]:
        """Orders shares as Kueue compares them: by ratio / weight, a zero weight that borrows
        after every other (among themselves by ratio)."""
        if self.weight == 0 and self.ratio != 0:
            return (1, self.ratio)
        return (0, self.ratio / self.weight if self.ratio else 0.0)

    @property
    def weighted(self) -> int:
        """The status's `weightedShare`: the share rounded up (MAX_SHARE for a zero weight
        that borrows)."""
        if self.weight == 0 and self.ratio != 0:
            return MAX_SHARE
        return int(math.ceil(self.ratio / self.weight)) if self.ratio else 0

    @property
    def infinite(self) -> bool:
        return self.weight == 0 and self.ratio != 0

    def borrows_on(self, frs) -> bool:
        return any(fr in self.borrowed for fr in frs)


NO_SHARE = Share()
BELOW_ANY = Share(ratio=-1.0)  # lower than every share (Kueue's NegativeDRS)


def share(node) -> Share:
    """Kueue's dominant resource share of a ClusterQueue or Cohort (none for a root)."""
    parent = node.parent
    if parent is None:
        return Share(weight=node.weight)
    borrowed: dict[str, int] = {}
    frs = []
    usage = node.usage
    for fr, quota in node.subtree.items():
        above = usage[fr] - quota
        if above > 0:
            borrowed[fr[1]] = borrowed.get(fr[1], 0) + above
            frs.append(fr)
    if not borrowed:
        return Share(weight=node.weight)
    ratio = 0.0
    lendable = parent.lendable
    for res in sorted(borrowed):
        lent = lendable.get(res, 0)
        if lent > 0:
            ratio = max(ratio, borrowed[res] * 1000.0 / lent)
    return Share(ratio, node.weight, True, frozenset(frs))


def path_name(cq) -> str:
    """The path "/root/…/parent/cq", as Kueue names a ClusterQueue in a preemption message."""
    names = [cq.name]
    node = cq.parent
    while node is not None:
        names.append(node.name)
        node = node.parent
    return "/" + "/".join(reversed(names))
