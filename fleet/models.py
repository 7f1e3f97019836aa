"""Fleet: clusters, pools, nodes, GPU models. Also the worker heartbeat the portal reports on."""

from django.db import models


class WorkerHeartbeat(models.Model):
    """The last time a Celery worker ran the heartbeat task; one row per worker hostname."""

    hostname = models.CharField(max_length=255, unique=True)
    nonce = models.CharField(max_length=64, blank=True)
    seen_at = models.DateTimeField()

    def __str__(self):
        return f"{self.hostname} @ {self.seen_at:%Y-%m-%d %H:%M:%S}"
