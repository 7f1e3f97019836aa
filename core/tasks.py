"""Celery tasks of core: the worker heartbeat and sending the messages the broker did not take.

Their names are the ones they had in fleet: messages already queued, and those kept in
UnsentTask, carry them."""

import socket

from django.utils import timezone

from core.models import WorkerHeartbeat
from core.worker import send_unsent as send_kept
from core.worker import task


@task(name="fleet.heartbeat")
def heartbeat(nonce: str = "") -> None:
    """Record that a worker is alive (beat runs it every minute; tests use the nonce)."""
    WorkerHeartbeat.objects.update_or_create(
        hostname=socket.gethostname(), defaults={"seen_at": timezone.now(), "nonce": nonce}
    )


@task(name="fleet.send_unsent")
def send_unsent() -> int:
    """Beat: send the messages kept while the broker was down."""
    return send_kept()
