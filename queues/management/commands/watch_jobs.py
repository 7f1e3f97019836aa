"""Watch every cluster and keep job status in step with it (a long-running process)."""

import signal
import threading

from django.core.management.base import BaseCommand

from queues.services.jobs.watch import watch_all


class Command(BaseCommand):
    help = "Watch Jobs, Workloads and Pods in every cluster and sync job status as they change."

    def handle(self, *args, **options):
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        self.stdout.write("Watching jobs; Ctrl-C to stop.")
        watch_all(stop=stop)
