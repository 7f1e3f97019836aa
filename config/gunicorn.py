"""gunicorn settings for `scripts/serve web` (the rest comes from its command line).

Each worker process counts its own metrics; with PROMETHEUS_MULTIPROC_DIR set (scripts/serve sets
it), they write them to files that /metrics adds up, and a worker that exits is marked dead so
its gauges stop counting."""

from prometheus_client import multiprocess


def child_exit(server, worker):
    multiprocess.mark_process_dead(worker.pid)
