"""Django under an ASGI server, with the portal's views in a fixed pool of threads.

Why not Django's own ASGIHandler: it runs a request's synchronous code (every view of the
portal, the middleware) on a thread made for that request, so a database connection cannot
outlive the request (Django's documentation says to turn persistent connections off under
ASGI), and nothing bounds how many run at once. Here the middleware and views run exactly as
under gunicorn's threads: `WEB_THREADS` long-lived threads per worker process, each with its
persistent connection, one request at a time. What changes is the response: a streaming
response whose content is an asynchronous iterator (a followed pod log) is sent from the event
loop after its thread has gone back to the pool, so a thousand open streams hold no thread; a
client that goes away cancels it. Synchronous streams (exports, static files) are read in the
pool thread that made them, as under WSGI.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers import base
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.http import FileResponse
from django.urls import set_script_prefix

logger = logging.getLogger("django.request")


class PooledASGIHandler(ASGIHandler):
    """An ASGI application: Django's request and response objects, its synchronous
    middleware chain in a pool of threads, asynchronous streams in the event loop."""

    def __init__(self, threads: int | None = None):
        base.BaseHandler.__init__(self)
        self.load_middleware(is_async=False)
        self.pool = ThreadPoolExecutor(
            max_workers=threads or settings.WEB_THREADS, thread_name_prefix="request"
        )

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            return await self._lifespan(receive, send)
        if scope["type"] != "http":
            raise ValueError(f"Django serves HTTP only, not {scope['type']}")
        await self.handle(scope, receive, send)

    async def _lifespan(self, receive, send):
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self.pool.shutdown(wait=False, cancel_futures=True)
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def handle(self, scope, receive, send):
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        loop = asyncio.get_running_loop()
        gone = asyncio.Event()
        listener = asyncio.create_task(self._wait_for_disconnect(receive, gone))
        try:
            response = await loop.run_in_executor(
                self.pool, self._respond, scope, body_file, send, gone, loop
            )
            if response is None:  # streamed from its own thread already
                return
            if not response.streaming:
                await self._send_start(response, send)
                for chunk, last in self.chunk_bytes(response.content):
                    await send({"type": "http.response.body", "body": chunk, "more_body": not last})
                return
            try:
                await self._send_async_stream(response, send, gone)
            finally:
                await loop.run_in_executor(self.pool, response.close)
        finally:
            listener.cancel()
            body_file.close()

    def _respond(self, scope, body_file, send, gone: asyncio.Event, loop):
        """In a pool thread, as WSGIHandler.__call__ does: request_started (which checks this
        thread's database connection), the middleware and the view. A response that is not
        streamed is closed here, so that request_finished runs where the connection was used;
        a synchronous stream is sent from here too (its iterator may read the database as it
        goes, on this thread's connection). Returns what the event loop still has to send."""
        set_script_prefix(get_script_prefix(scope))
        signals.request_started.send(sender=self.__class__, scope=scope)
        request, response = self.create_request(scope, body_file)
        if request is not None:
            response = self.get_response(request)
            response._handler_class = self.__class__
        if isinstance(response, FileResponse):
            response.block_size = self.chunk_size
        if not response.streaming:
            response.close()
            return response
        if response.is_async:
            return response
        try:

            def put(message):
                asyncio.run_coroutine_threadsafe(send(message), loop).result()

            put(self._start_message(response))
            for part in response.streaming_content:
                if gone.is_set():
                    return None
                for chunk, _ in self.chunk_bytes(part):
                    put({"type": "http.response.body", "body": chunk, "more_body": True})
            put({"type": "http.response.body"})
        except OSError:  # the client went away while we sent
            pass
        finally:
            response.close()
        return None

    async def _wait_for_disconnect(self, receive, gone: asyncio.Event):
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                gone.set()
                return

    @staticmethod
    def _start_message(response) -> dict:
        headers = [
            (str(name).encode("ascii"), str(value).encode("latin1"))
            for name, value in response.items()
        ]
        headers += [
            (b"Set-Cookie", cookie.output(header="").encode("ascii").strip())
            for cookie in response.cookies.values()
        ]
        return {"type": "http.response.start", "status": response.status_code, "headers": headers}

    async def _send_start(self, response, send):
        await send(self._start_message(response))

    async def _send_async_stream(self, response, send, gone: asyncio.Event):
        """In the event loop, holding no thread; a client that goes away cancels the stream
        (its iterator sees CancelledError where it waits)."""

        async def stream():
            await self._send_start(response, send)
            async for part in response.streaming_content:
                for chunk, _ in self.chunk_bytes(part):
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body"})

        streaming = asyncio.create_task(stream())
        waiter = asyncio.create_task(gone.wait())
        await asyncio.wait({streaming, waiter}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if not streaming.done():
            streaming.cancel()
        try:
            await streaming
        except asyncio.CancelledError:
            if not gone.is_set():
                raise
        except OSError:  # the client went away while we sent
            pass
