"""Whether Celery workers are alive: each runs the beat's heartbeat task every minute."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from core.models import UnsentTask, WorkerHeartbeat

# Beat sends a heartbeat every 60 s (config/celery.py); three missed ones mean trouble.
HEARTBEAT_STALE = timedelta(seconds=180)


def worker_status(*, now=None) -> dict:
    """{"alive": hostnames heard from lately, "last_seen": the newest heartbeat or None,
    "ok": whether any worker is alive}. No heartbeat means no worker runs, or beat is down."""
    now = now or timezone.now()
    beats = list(WorkerHeartbeat.objects.order_by("-seen_at").values_list("hostname", "seen_at"))
    alive = [host for host, seen in beats if now - seen <= HEARTBEAT_STALE]
    return {
        "alive": alive,
        "last_seen": beats[0][1] if beats else None,
        "ok": bool(alive),
        "stale_after_seconds": int(HEARTBEAT_STALE.total_seconds()),
    }


def unsent_since(*, name: str) -> dict[tuple, object]:
    """When each message of task `name` that the broker did not take was first kept, by its
    args as a tuple (core.worker keeps them until the broker answers); {} when none waits."""
    since: dict[tuple, object] = {}
    rows = UnsentTask.objects.filter(name=name).order_by("pk").values_list("args", "created_at")
    for args, created_at in rows:
        since.setdefault(tuple(args or ()), created_at)
    return since


def unsent_wait_text(since, *, what: str) -> str:
    """What people waiting on a message kept while the broker was down are told."""
    at = timezone.localtime(since)
    return (
        f"Waiting to be sent: the message broker has not been answering since "
        f"{at:%H:%M} {at:%Z}; {what} is kept and sent as soon as it answers."
    )


def no_worker_text(status: dict, *, what: str) -> str:
    """What people waiting on a worker are told when none has reported lately."""
    at = timezone.localtime(status["last_seen"])
    return (
        f"Waiting for a worker: none has reported since {at:%H:%M} {at:%Z} (the portal's "
        f"workers may be stopped); {what} is sent when one runs."
    )
