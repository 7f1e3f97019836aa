"""Celery tasks for fleet."""

import socket

from celery import shared_task
from django.utils import timezone

from fleet.models import WorkerHeartbeat


@shared_task(name="fleet.heartbeat", ignore_result=True)
def heartbeat(nonce: str = "") -> None:
    """Record that a worker is alive (beat runs it every minute; tests use the nonce)."""
    WorkerHeartbeat.objects.update_or_create(
        hostname=socket.gethostname(), defaults={"seen_at": timezone.now(), "nonce": nonce}
    )
