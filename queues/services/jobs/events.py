"""The Kubernetes Events of a job's objects (its batch Job or vcjob, its Workload, its pods), as
the cluster's components recorded them: read from the team's namespace when a page or the API
asks (cached a few seconds, so a page polling every 2 s does not list them each time), and
shown on the timeline beside the state changes. The status sync copies a job's events into the
database shortly after it ends, and its timeline reads that copy from then on."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.core.cache import cache
from django.db import transaction
from django.utils.dateparse import parse_datetime

from fleet import kube
from fleet.services.cluster_health import cluster_may_call
from queues.models import Job, JobEvent

log = logging.getLogger(__name__)
CACHE_SECONDS = 5
MAX_EVENTS = 200


EVENT_FIELDS = ("at", "type", "reason", "message", "object", "count")
# A finished job's events are copied this long after it ended, so the last ones are in.
KEEP_AFTER = timedelta(seconds=30)


def job_events(*, job: Job) -> list[dict]:
    """[{"at", "type", "reason", "message", "object", "count"}] oldest first; [] when the job
    never reached a cluster or the cluster cannot be asked now. A finished job's events come
    from the copy kept when it ended, once there is one."""
    if job.cluster is None or not job.k8s_name or job.state in ("draft", "pending_approval"):
        return []
    if job.events_kept_at is not None:
        return list(JobEvent.objects.filter(job=job).values(*EVENT_FIELDS))
    key = f"job-events:{job.pk}:{job.state}"
    found = cache.get(key)
    if found is not None:
        return found
    if not cluster_may_call(cluster=job.cluster):
        return []  # the cluster's breaker is open: no request, the page says why elsewhere
    try:
        items = kube.client_for(job.cluster).list("v1", "Event", namespace=job.team.namespace)
    except kube.KubeError as exc:
        log.info("events of job %s not read: %s", job.pk, exc)
        # Not asked again for a few seconds: a page polling every 2 s would ask every time.
        cache.set(key, [], CACHE_SECONDS)
        return []
    events = _events_of(job, items)
    cache.set(key, events, CACHE_SECONDS)
    return events


def _names(job: Job) -> set[str]:
    names = {job.k8s_name, job.workload_name} | {p.name for p in job.pods.all()}
    names.discard("")
    return names


def _events_of(job: Job, items: list[dict]) -> list[dict]:
    names = _names(job)
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
    return events[-MAX_EVENTS:]


def jobs_keep_events(*, client, jobs: list[Job], now) -> int:
    """Copy the events of jobs that ended a little while ago into JobEvent rows (one list call
    per namespace), so their timelines outlive the cluster's events. Returns jobs kept."""
    due = [
        j for j in jobs
        if j.state in Job.FINAL_STATES and j.events_kept_at is None and j.finished_at
        and j.finished_at <= now - KEEP_AFTER
    ]  # fmt: skip
    by_namespace: dict[str, list[Job]] = {}
    for job in due:
        by_namespace.setdefault(job.team.namespace, []).append(job)
    kept = 0
    for namespace, group in by_namespace.items():
        try:
            items = client.list("v1", "Event", namespace=namespace)
        except kube.KubeError as exc:
            log.info("events of namespace %s not kept now: %s", namespace, exc)
            continue
        with transaction.atomic():
            for job in group:
                rows = [JobEvent(job=job, **event) for event in _events_of(job, items)]
                JobEvent.objects.filter(job=job).delete()
                JobEvent.objects.bulk_create(rows)
                Job.objects.filter(pk=job.pk).update(events_kept_at=now)
                job.events_kept_at = now
                kept += 1
    return kept


# Where a state or an event falls in the story of a job when the clock cannot tell them apart
# (events carry whole seconds): submitted < queued < quota reserved < admitted < pods created <
# scheduled < pulled < started < running < ended. Events not named here sit just before the end.
_CAUSE_ORDER = (
    ("draft",), ("pending_approval",), ("submitted",), ("CreatedWorkload", "Suspended"),
    ("queued", "Pending"), ("QuotaReserved",), ("admitted", "Admitted"),
    ("Resumed", "SuccessfulCreate", "CreatedJobSet", "PyTorchJobCreated"),
    ("FailedScheduling",), ("Scheduled",), ("Pulling",), ("Pulled", "Failed", "BackOff"),
    ("Created",), ("Started",), ("running",),
)  # fmt: skip
_CAUSE_RANK = {name: rank for rank, names in enumerate(_CAUSE_ORDER) for name in names}
_RANK_UNKNOWN = len(_CAUSE_ORDER)  # after "running", before the end
_RANK_END = len(_CAUSE_ORDER) + 1  # preempted, succeeded, failed, cancelled, rejected


def _cause_rank(name: str) -> int:
    if name in Job.FINAL_STATES or name == Job.State.PREEMPTED:
        return _RANK_END
    return _CAUSE_RANK.get(name, _RANK_UNKNOWN)


def _story_key(row: dict) -> tuple:
    return (row["at"].replace(microsecond=0), row["rank"])


def job_timeline(*, job: Job) -> list[dict]:
    """The job's state changes and its cluster events as one story: in time order, where the
    cluster's whole seconds tie with our stamps in the order one caused the other, no event
    before the job was submitted, and an event that repeats a state change (Kueue's
    "Admitted") folded into it."""
    states = [
        {"at": t.at, "kind": "state", "label": t.to_state_label, "text": t.reason,
         "rank": _cause_rank(t.to_state)}
        for t in job.transitions.all()
    ]  # fmt: skip
    labels = {row["label"].lower(): row for row in states}
    events = []
    for e in job_events(job=job):
        if e["at"] is None:
            continue
        text = f"{e['object']}: {e['message']}" + (f" (×{e['count']})" if e["count"] > 1 else "")
        same = labels.get(e["reason"].lower()) if e["object"].startswith("Workload/") else None
        if same is not None:  # the state change says it already
            same["text"] = same["text"] or e["message"]
            continue
        events.append({
            "at": e["at"], "kind": "event", "label": e["reason"], "text": text,
            "warning": e["type"] == "Warning", "rank": _cause_rank(e["reason"]),
        })  # fmt: skip
    # The cluster's clock may lag ours: nothing it records comes before the submission.
    start = states[0]["at"] if states else None
    for event in events:
        event["sort_at"] = max(event["at"], start) if start else event["at"]
    events.sort(key=lambda e: (*_story_key({**e, "at": e["sort_at"]}), e["at"]))
    # The state changes keep their recorded order (a preempted job is queued again within the
    # same second); the events fall between them by time, then by cause.
    story, i = [], 0
    for event in events:
        key = _story_key({**event, "at": event["sort_at"]})
        while i < len(states) and _story_key(states[i]) <= key:
            story.append(states[i])
            i += 1
        story.append(event)
    return story + states[i:]
