"""Label selectors, node affinity and taints, matched as Kubernetes matches them: what Kueue
reads to tell whether a flavor suits a pod set or a ClusterQueue a namespace (and kubesim's
scheduler to bind pods)."""

from __future__ import annotations

BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


def expression_matches(expr: dict, labels: dict) -> bool:
    key, op = expr.get("key"), expr.get("operator")
    values = expr.get("values") or []
    present = key in labels
    if op == "In":
        return present and labels[key] in values
    if op == "NotIn":
        return not present or labels[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and values:
        try:
            have, want = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def label_selector_matches(selector: dict | None, labels: dict) -> bool:
    """A metav1.LabelSelector against labels; None matches nothing, {} everything."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    return all(expression_matches(e, labels) for e in selector.get("matchExpressions") or [])


def required_terms(pod_spec: dict) -> list[dict]:
    """The pod's required node affinity terms (ORed)."""
    affinity = (pod_spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    return required.get("nodeSelectorTerms") or []


def node_matches(pod_spec: dict, labels: dict) -> bool:
    """nodeSelector and required node affinity of a pod against a node's labels."""
    for key, value in (pod_spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    terms = required_terms(pod_spec)
    if not terms:
        return True
    return any(
        all(expression_matches(e, labels) for e in term.get("matchExpressions") or [])
        for term in terms
    )


def tolerates(tolerations: list[dict], taint: dict) -> bool:
    """Whether any toleration matches the taint (key, operator, value, effect)."""
    for tol in tolerations or []:
        if tol.get("effect") and tol.get("effect") != taint.get("effect"):
            continue
        op = tol.get("operator") or "Equal"
        if not tol.get("key"):
            if op == "Exists":
                return True
            continue
        if tol.get("key") != taint.get("key"):
            continue
        if op == "Exists" or (tol.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def untolerated(taints: list[dict], tolerations: list[dict]) -> list[dict]:
    """Taints with a blocking effect that no toleration matches."""
    return [
        t
        for t in taints or []
        if t.get("effect") in BLOCKING_EFFECTS and not tolerates(tolerations, t)
    ]


def taint_text(taint: dict) -> str:
    value = taint.get("value")
    return f"{taint.get('key')}{'=' + value if value else ''}:{taint.get('effect')}"
