"""The Kubernetes Events of a job's objects (its batch Job or vcjob, its Workload, its pods), as
the cluster's components recorded them: read from the team's namespace when a page or the API
asks (cached a few seconds, so a page polling every 2 s does not list them each time), and
shown on the timeline beside the state changes."""

from __future__ import annotations

import logging

from django.core.cache import cache
from django.utils.dateparse import parse_datetime

from fleet import kube
from queues.models import Job

log = logging.getLogger(__name__)
CACHE_SECONDS = 5
MAX_EVENTS = 200


def job_events(*, job: Job) -> list[dict]:
    """[{"at", "type", "reason", "message", "object", "count"}] oldest first; [] when the job
    never reached a cluster or the cluster cannot be asked now."""
    if job.cluster is None or not job.k8s_name or job.state in ("draft", "pending_approval"):
        return []
    key = f"job-events:{job.pk}:{job.state}"
    found = cache.get(key)
    if found is not None:
        return found
    names = {job.k8s_name, job.workload_name} | set(job.pods.values_list("name", flat=True))
    names.discard("")
    try:
        items = kube.client_for(job.cluster).list("v1", "Event", namespace=job.team.namespace)
    except kube.KubeError as exc:
        log.info("events of job %s not read: %s", job.pk, exc)
        return []
    events = []
    for item in items:
        involved = item.get("involvedObject") or {}
        if involved.get("name") not in names:
            continue
        at = parse_datetime(item.get("lastTimestamp") or item.get("eventTime") or "")
        events.append({
            "at": at, "type": item.get("type", ""), "reason": item.get("reason", ""),
            "message": item.get("message", ""), "count": int(item.get("count") or 1),
            "object": f"{involved.get('kind', '')}/{involved.get('name', '')}",
        })  # fmt: skip
    events.sort(key=lambda e: (e["at"] is None, e["at"]))
    events = events[-MAX_EVENTS:]
    cache.set(key, events, CACHE_SECONDS)
    return events


def job_timeline(*, job: Job) -> list[dict]:
    """The job's state changes and its cluster events, in time order."""
    rows = [
        {"at": t.at, "kind": "state", "label": t.to_state_label, "text": t.reason}
        for t in job.transitions.all()
    ]
    rows += [
        {"at": e["at"], "kind": "event", "label": e["reason"], "warning": e["type"] == "Warning",
         "text": f"{e['object']}: {e['message']}" + (f" (×{e['count']})" if e["count"] > 1 else "")}
        for e in job_events(job=job)
        if e["at"] is not None
    ]  # fmt: skip
    rows.sort(key=lambda r: r["at"])
    return rows
