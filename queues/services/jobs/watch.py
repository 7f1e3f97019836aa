"""The long-running job watcher: watches trigger syncs, the sync itself lists.

One thread per (cluster, kind) watches Jobs (or vcjobs), Workloads and Pods from the last
resourceVersion it saw; any event marks the cluster dirty, and the cluster's loop runs the
ordinary list-based sync (debounced). A 410 Gone re-lists to get a fresh resourceVersion. A
periodic sync still runs when nothing happens, so a missed event only delays an update.
"""

from __future__ import annotations

import logging
import threading
import time

from django.db import close_old_connections, connection

from fleet import kube
from fleet.models import Cluster
from queues.backends import backend_for
from queues.manifests.common import MANAGED_SELECTOR
from queues.services.jobs.sync import jobs_sync_cluster

log = logging.getLogger(__name__)
DEBOUNCE_SECONDS = 0.2
IDLE_SYNC_SECONDS = 10.0
WATCH_TIMEOUT_SECONDS = 60


def watched_kinds(cluster: Cluster) -> list[tuple[str, str, str | None]]:
    """(apiVersion, kind, label selector) the watcher follows for a cluster."""
    return [*backend_for(cluster).watched_kinds(cluster), ("v1", "Pod", MANAGED_SELECTOR)]


def list_resource_version(client, api_version: str, kind: str, selector: str | None) -> str:
    """The resourceVersion a watch can start from (a one-item list)."""
    query = {"limit": "1"}
    if selector:
        query["labelSelector"] = selector
    page = client.raw_get(client.resource(api_version, kind).path(), query)
    return (page.get("metadata") or {}).get("resourceVersion", "")


class ClusterWatcher:
    """Watch one cluster and sync its jobs whenever something changes."""

    def __init__(self, cluster: Cluster, stop: threading.Event):
        self.cluster = cluster
        self.stop = stop
        self.dirty = threading.Event()
        self.resource_versions: dict[str, str] = {}

    def start(self) -> list[threading.Thread]:
        threads = [
            threading.Thread(target=self._watch_loop, args=kind, daemon=True,
                             name=f"watch-{self.cluster.name}-{kind[1]}")
            for kind in watched_kinds(self.cluster)
        ]  # fmt: skip
        threads.append(
            threading.Thread(target=self._sync_loop, daemon=True, name=f"sync-{self.cluster.name}")
        )
        for thread in threads:
            thread.start()
        return threads

    def _watch_loop(self, api_version: str, kind: str, selector: str | None) -> None:
        client = kube.client_for(self.cluster)
        key = f"{api_version}/{kind}"
        while not self.stop.is_set():
            try:
                if not self.resource_versions.get(key):
                    self.resource_versions[key] = list_resource_version(
                        client, api_version, kind, selector
                    )
                    self.dirty.set()
                for event in client.watch(
                    api_version,
                    kind,
                    label_selector=selector,
                    resource_version=self.resource_versions[key],
                    timeout_seconds=WATCH_TIMEOUT_SECONDS,
                ):
                    rv = ((event.get("object") or {}).get("metadata") or {}).get("resourceVersion")
                    if rv:
                        self.resource_versions[key] = rv
                    if event.get("type") != "BOOKMARK":
                        self.dirty.set()
                    if self.stop.is_set():
                        return
            except kube.ResourceExpired:
                log.info("watch of %s on %s expired; listing again", kind, self.cluster.name)
                self.resource_versions[key] = ""
            except kube.KubeError as exc:
                log.warning("watch of %s on %s failed: %s", kind, self.cluster.name, exc)
                self.stop.wait(2.0)

    def _sync_loop(self) -> None:
        try:
            self._sync_until_stopped()
        finally:
            connection.close()  # this thread's own database connection

    def _sync_until_stopped(self) -> None:
        while not self.stop.is_set():
            self.dirty.wait(IDLE_SYNC_SECONDS)
            if self.stop.is_set():
                return
            time.sleep(DEBOUNCE_SECONDS)
            self.dirty.clear()
            close_old_connections()
            try:
                jobs_sync_cluster(cluster=self.cluster)
            except kube.KubeError as exc:
                log.warning("job sync of %s failed: %s", self.cluster.name, exc)
                self.stop.wait(2.0)
            except Exception:  # keep watching; the next event or tick tries again
                log.exception("job sync of %s crashed", self.cluster.name)
                self.stop.wait(2.0)


def watch_all(*, stop: threading.Event) -> None:
    """Watch every registered cluster until `stop` is set (new clusters need a restart)."""
    watchers = [ClusterWatcher(c, stop) for c in Cluster.objects.filter(enabled=True)]
    for watcher in watchers:
        watcher.start()
    stop.wait()
