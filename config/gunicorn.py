"""gunicorn settings for `scripts/serve web` (the rest comes from its command line).

Each worker process counts its own metrics; with PROMETHEUS_MULTIPROC_DIR set (scripts/serve sets
it), they write them to files that /metrics adds up, and a worker that exits is marked dead so
its gauges stop counting."""

import os
import signal

from prometheus_client import multiprocess
from uvicorn_worker import UvicornWorker


def child_exit(server, worker):
    multiprocess.mark_process_dead(worker.pid)


class PortalWorker(UvicornWorker):
    """gunicorn's worker for the portal's ASGI application (`--worker-class
    config.gunicorn.PortalWorker`). The client's address is the socket's: X-Forwarded-For is
    read by the portal only behind TRUSTED_PROXY_COUNT proxies, never by the server. Open
    streams get a few seconds to end when the worker stops. A worker whose arbiter is gone
    (killed with no chance to stop its workers, e.g. by the OOM killer) stops itself at its
    next heartbeat (every --timeout seconds) instead of serving on, orphaned."""

    CONFIG_KWARGS = {
        "loop": "asyncio",
        "http": "httptools",
        "proxy_headers": False,
        "timeout_graceful_shutdown": 3,
    }

    async def callback_notify(self) -> None:
        self.notify()
        if os.getppid() != self.ppid:
            self.log.warning("worker %s: its arbiter %s is gone; stopping", self.pid, self.ppid)
            # uvicorn's own SIGTERM handler: the same graceful stop the arbiter would ask for.
            os.kill(os.getpid(), signal.SIGTERM)
