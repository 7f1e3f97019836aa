"""gunicorn settings for `scripts/serve web` (the rest comes from its command line).

Each worker process counts its own metrics; with PROMETHEUS_MULTIPROC_DIR set (scripts/serve sets
it), they write them to files that /metrics adds up, and a worker that exits is marked dead so
its gauges stop counting."""

from prometheus_client import multiprocess
from uvicorn_worker import UvicornWorker


def child_exit(server, worker):
    multiprocess.mark_process_dead(worker.pid)


class PortalWorker(UvicornWorker):
    """gunicorn's worker for the portal's ASGI application (`--worker-class
    config.gunicorn.PortalWorker`). The client's address is the socket's: X-Forwarded-For is
    read by the portal only behind TRUSTED_PROXY_COUNT proxies, never by the server. Open
    streams get a few seconds to end when the worker stops."""

    CONFIG_KWARGS = {
        "loop": "asyncio",
        "http": "httptools",
        "proxy_headers": False,
        "timeout_graceful_shutdown": 3,
    }
