"""`GET /api/v1/jobs/<id>/logs/?follow=1`: a pod's log streamed as it is written.

Under the ASGI server (config/asgi_handler.py) the stream is an asynchronous iterator sent from
the event loop, so an open follow holds no request thread; under WSGI (the test client, or a
WSGI server) it is the synchronous stream it always was. Either way it is counted against the
caps on open follows (429 past them) and ends when the pod's log ends, when the client goes
away, or after LOG_FOLLOW_MAX_SECONDS. Who may read it is decided by job_log, as without follow.
"""

from functools import partial

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.handlers.asgi import ASGIRequest
from django.http import StreamingHttpResponse
from rest_framework.exceptions import PermissionDenied, Throttled

from queues.services import log_streams
from queues.services.jobs import logs as job_logs


def follow_response(request, job, *, pod: str, tail: int) -> StreamingHttpResponse:
    served_async = isinstance(getattr(request, "_request", request), ASGIRequest)
    try:
        chunks = job_logs.job_log(
            user=request.user, job=job, pod=pod, tail=tail, follow=True,
            follow_async=served_async,
        )  # fmt: skip
    except DjangoPermissionDenied as exc:
        raise PermissionDenied(str(exc)) from exc
    try:
        stream = log_streams.log_stream_open(user=request.user, job=job)
    except log_streams.TooManyStreams as exc:
        getattr(chunks, "close", lambda: None)()  # a synchronous follow is open already
        raise Throttled(wait=exc.retry_after, detail=str(exc)) from exc
    if hasattr(chunks, "__aiter__"):
        content = log_streams.log_stream_async(stream_id=stream.pk, chunks=chunks)
    else:
        content = log_streams.log_stream_sync(stream_id=stream.pk, chunks=chunks)
    response = StreamingHttpResponse(content, content_type="text/plain; charset=utf-8")
    # However the stream ends (the client gone, the pod done), the response is closed.
    response._resource_closers.append(partial(log_streams.log_stream_close, stream_id=stream.pk))
    return response
