"""Followed pod logs being streamed now: what the caps on open follows count."""

from django.conf import settings
from django.db import models
from django.utils import timezone


class LogStream(models.Model):
    """One open `logs/?follow=1` stream. The process that streams it refreshes `seen_at`; a row
    left by a process that died stops counting once it is stale (services.log_streams)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="log_streams"
    )
    job = models.ForeignKey("queues.Job", on_delete=models.CASCADE, related_name="log_streams")
    opened_at = models.DateTimeField(default=timezone.now)
    seen_at = models.DateTimeField(default=timezone.now, db_index=True)

    def __str__(self):
        return f"log stream of job {self.job_id} for {self.user_id}"
