"""Whether Celery workers are alive: each runs the beat's heartbeat task every minute."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from core.models import WorkerHeartbeat

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
