"""The real API server's audit log (cluster/components.py: every request of a ServiceAccount or
an unauthenticated client, with the authorization decision and the status code), read back by
the least-privilege tests."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from cluster import components
from cluster.processes import Layout


@dataclass(frozen=True)
class Request:
    """One request as the API server audited it."""

    user: str
    verb: str
    resource: str  # group/resource[/subresource], "" for a non-resource URL
    namespace: str
    name: str
    code: int
    decision: str  # allow or forbid (authorization); an admission refusal is allow then 403
    reason: str
    user_agent: str
    at: datetime

    def describe(self) -> str:
        where = f" in {self.namespace}" if self.namespace else ""
        what = f"{self.resource}/{self.name}" if self.name else self.resource
        return f"{self.verb} {what}{where} -> {self.code}"


def path(kubeconfig: Path) -> Path:
    return components.audit_log(Layout(Path(kubeconfig).parent))


def read(kubeconfig: Path, *, since: datetime | None = None) -> list[Request]:
    """Every audited request (completed), oldest first, since a moment (UTC) when given."""
    out = []
    log = path(kubeconfig)
    if not log.exists():
        return out
    for line in log.read_text().splitlines():
        event = json.loads(line)
        if event.get("stage") != "ResponseComplete":
            continue
        at = datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00"))
        if since is not None and at < since:
            continue
        ref = event.get("objectRef") or {}
        resource = ref.get("resource", "")
        if ref.get("subresource"):
            resource += f"/{ref['subresource']}"
        if ref.get("apiGroup"):
            resource = f"{ref['apiGroup']}/{resource}"
        annotations = event.get("annotations") or {}
        status = event.get("responseStatus") or {}
        out.append(Request(
            user=event["user"]["username"], verb=event["verb"], resource=resource,
            namespace=ref.get("namespace", ""), name=ref.get("name", ""),
            code=int(status.get("code") or 0),
            decision=annotations.get("authorization.k8s.io/decision", ""),
            reason=status.get("message", "") or annotations.get("authorization.k8s.io/reason", ""),
            user_agent=event.get("userAgent", ""), at=at,
        ))  # fmt: skip
    return out
