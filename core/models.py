"""The portal's own rows: the heartbeat each Celery worker leaves, and the messages the broker
did not take. Their tables keep the names they had in fleet (no data moved)."""

from django.db import models


class WorkerHeartbeat(models.Model):
    """The last time a Celery worker ran the heartbeat task; one row per worker hostname."""

    hostname = models.CharField(max_length=255, unique=True)
    nonce = models.CharField(max_length=64, blank=True)
    seen_at = models.DateTimeField()

    class Meta:
        db_table = "fleet_workerheartbeat"

    def __str__(self):
        return f"{self.hostname} @ {self.seen_at:%Y-%m-%d %H:%M:%S}"


class UnsentTask(models.Model):
    """A Celery message that could not be sent (the broker was down) after its transaction
    committed; core.worker keeps it here and the beat's send_unsent sends it once the broker
    is back, so that nothing a request promised is lost with the broker."""

    name = models.CharField(max_length=200)
    args = models.JSONField(default=list)
    kwargs = models.JSONField(default=dict)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "fleet_unsenttask"
        ordering = ["pk"]

    def __str__(self):
        return f"{self.name}{tuple(self.args)}"
