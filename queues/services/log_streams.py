"""Followed pod logs: the caps on how many are open (per person and in all) and how long one
lasts. A follow holds no thread under the ASGI server (config/asgi_handler.py); what it does
hold is a connection to the client and one to the cluster's API server, so they are counted.

The count is in the database (LogStream), so every web server process sees the same. The
process that streams a follow refreshes its row every REFRESH_SECONDS and deletes it when the
follow ends; a row not refreshed for STALE no longer counts (its process died).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from datetime import timedelta

from asgiref.sync import sync_to_async
from django.conf import settings
from django.utils import timezone

from queues.models import Job, LogStream

logger = logging.getLogger(__name__)

REFRESH_SECONDS = 30.0
STALE = timedelta(seconds=4 * REFRESH_SECONDS)
# What a 429 suggests: about when a follow of someone else's ends or a stale one stops counting.
RETRY_AFTER_SECONDS = 30


class TooManyStreams(Exception):
    def __init__(self, message: str):
        super().__init__(message)
        self.retry_after = RETRY_AFTER_SECONDS


def log_stream_open(*, user, job: Job) -> LogStream:
    """Count a new follow, or raise TooManyStreams when it would pass a cap."""
    now = timezone.now()
    LogStream.objects.filter(seen_at__lt=now - STALE).delete()
    stream = LogStream.objects.create(user=user, job=job, opened_at=now, seen_at=now)
    # Those opened before this one (and it): of two racing for the last place, the later waits.
    ahead = LogStream.objects.filter(seen_at__gte=now - STALE, pk__lte=stream.pk)
    if ahead.filter(user=user).count() > settings.LOG_FOLLOWS_PER_USER:
        stream.delete()
        raise TooManyStreams(
            f"You are following {settings.LOG_FOLLOWS_PER_USER} logs already, the most one "
            "person may at once. Stop one of them, or read the log without follow."
        )
    if ahead.count() > settings.LOG_FOLLOWS_TOTAL:
        stream.delete()
        raise TooManyStreams(
            f"The portal is streaming {settings.LOG_FOLLOWS_TOTAL} followed logs, as many as it "
            "serves at once. Try again shortly, or read the log without follow."
        )
    return stream


def log_stream_refresh(*, stream_id: int) -> None:
    LogStream.objects.filter(pk=stream_id).update(seen_at=timezone.now())


def log_stream_close(*, stream_id: int) -> None:
    LogStream.objects.filter(pk=stream_id).delete()


def log_stream_sync(*, stream_id: int, chunks):
    """The chunks of a follow served by a thread (WSGI), until the pod's log ends or the
    follow has lasted LOG_FOLLOW_MAX_SECONDS (checked as chunks come)."""
    deadline = time.monotonic() + settings.LOG_FOLLOW_MAX_SECONDS
    refresh_at = time.monotonic() + REFRESH_SECONDS
    try:
        for chunk in chunks:
            yield chunk
            now = time.monotonic()
            if now >= deadline:
                return
            if now >= refresh_at:
                log_stream_refresh(stream_id=stream_id)
                refresh_at = now + REFRESH_SECONDS
    finally:
        close = getattr(chunks, "close", None)
        if close:
            close()


_END = object()


async def log_stream_async(*, stream_id: int, chunks):
    """The chunks of a follow served from the event loop, until the pod's log ends, the client
    goes away (the server cancels this) or the follow has lasted LOG_FOLLOW_MAX_SECONDS, also
    when the pod writes nothing. The row is refreshed meanwhile, from a worker thread."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue(maxsize=64)

    async def pump():
        try:
            async for chunk in chunks:
                await queue.put(chunk)
        finally:
            with contextlib.suppress(asyncio.QueueFull):  # (full: the loop below sees it done)
                queue.put_nowait(_END)

    pumping = asyncio.create_task(pump())
    refresh = sync_to_async(log_stream_refresh, thread_sensitive=False)
    deadline = loop.time() + settings.LOG_FOLLOW_MAX_SECONDS
    refresh_at = loop.time() + REFRESH_SECONDS
    try:
        while True:
            now = loop.time()
            if now >= deadline:
                return
            if now >= refresh_at:
                await refresh(stream_id=stream_id)
                refresh_at = now + REFRESH_SECONDS
            if pumping.done() and queue.empty():
                return
            try:
                item = await asyncio.wait_for(queue.get(), min(deadline, refresh_at) - now)
            except TimeoutError:
                continue
            if item is _END:
                return
            yield item
    finally:
        pumping.cancel()
        if pumping.done() and not pumping.cancelled() and pumping.exception():
            logger.info("follow of a pod log ended: %s", pumping.exception())
