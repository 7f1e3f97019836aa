"""One cached KubeClient per Cluster row, built from a kubeconfig (+ context) or in-cluster."""

from __future__ import annotations

import os
import threading
from typing import Any

import yaml
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.config.config_exception import ConfigException

from fleet.kube import inflight
from fleet.kube.client import USER_AGENT, KubeClient
from fleet.kube.errors import ConfigurationError
from fleet.kube.health import ClusterHealth

_clients: dict[Any, KubeClient] = {}
_clients_lock = threading.Lock()
# Health outlives a client rebuilt for new settings: a dead cluster stays known dead.
_health: dict[int, ClusterHealth] = {}


def _cache_key(cluster) -> tuple:
    path = cluster.kubeconfig_path or ""
    try:
        # A rewritten kubeconfig (e.g. kubesim restarted on another port) means a new client.
        mtime = os.stat(path).st_mtime_ns if path and not cluster.in_cluster else None
    except OSError:
        mtime = None
    return (cluster.pk, cluster.name, bool(cluster.in_cluster), path, cluster.context or "", mtime)


def in_cluster_available() -> bool:
    """Whether this process runs in a pod: the kubelet gives every pod the API server's Service
    address (what the official client's in-cluster configuration reads, with the token of the
    pod's ServiceAccount). A pod without a token (the migration Job's, which registers the
    cluster and never calls it) is in the cluster all the same."""
    from kubernetes.config import incluster_config

    return bool(
        os.environ.get(incluster_config.SERVICE_HOST_ENV_NAME)
        and os.environ.get(incluster_config.SERVICE_PORT_ENV_NAME)
    )


def build_api_client(
    *, kubeconfig_path: str = "", context: str = "", in_cluster: bool = False
) -> k8s_client.ApiClient:
    """An official ApiClient for a kubeconfig (+ context) or the in-cluster service account."""
    configuration = k8s_client.Configuration()
    try:
        if in_cluster:
            k8s_config.load_incluster_config(client_configuration=configuration)
        else:
            if not kubeconfig_path:
                raise ConfigurationError("No kubeconfig path given and not in-cluster")
            k8s_config.load_kube_config(
                config_file=kubeconfig_path,
                context=context or None,
                client_configuration=configuration,
                persist_config=False,
            )
    except (ConfigException, OSError, ValueError, TypeError) as exc:
        raise ConfigurationError(f"Cannot load the cluster configuration: {exc}") from exc
    # Retries are ours (with classification and backoff), not urllib3's silent ones.
    configuration.retries = False
    api = k8s_client.ApiClient(configuration=configuration)
    api.user_agent = USER_AGENT
    return api


def client_for(cluster) -> KubeClient:
    """The cached KubeClient for a Cluster row (rebuilt when its connection settings change)."""
    key = _cache_key(cluster)
    with _clients_lock:
        found = _clients.get(key)
        if found is not None:
            return found
        stale = [k for k in _clients if k[0] == cluster.pk and k[1] == cluster.name]
        for old in stale:
            _clients.pop(old).close()
    api = build_api_client(
        kubeconfig_path=cluster.kubeconfig_path,
        context=cluster.context,
        in_cluster=cluster.in_cluster,
    )
    with _clients_lock:
        health = _health.setdefault(cluster.pk, ClusterHealth(cluster.pk, cluster.name))
    created = KubeClient(api, name=cluster.name, health=health)
    with _clients_lock:
        # Another thread may have built one meanwhile; keep the first.
        existing = _clients.setdefault(key, created)
    if existing is not created:
        created.close()
    return existing


def clear_client_cache() -> None:
    """Forget every cached client (tests, and after a cluster's settings change)."""
    with _clients_lock:
        clients = list(_clients.values())
        _clients.clear()
        forgotten = list(_health)
        _health.clear()
    for cluster_id in forgotten:
        inflight.forget(cluster_id)
    for kube in clients:
        kube.close()


# What reading a file that is not a kubeconfig raises: YAML that does not parse (or bytes that
# are not text), YAML that is not a mapping of the expected lists, or no contexts at all.
UNREADABLE = (
    ConfigException,
    OSError,
    ValueError,
    TypeError,
    AttributeError,
    KeyError,
    yaml.YAMLError,
)
KUBECONFIG_MAX_BYTES = 1024 * 1024


def _contexts(path: str) -> list[str]:
    if os.path.getsize(path) > KUBECONFIG_MAX_BYTES:
        raise ValueError("too large")
    contexts, _ = k8s_config.list_kube_config_contexts(config_file=path)
    return [str(c["name"]) for c in contexts or []]


def kubeconfig_contexts(path: str) -> list[str]:
    """The context names in a kubeconfig file (for form validation); [] when unreadable."""
    try:
        return _contexts(path)
    except UNREADABLE:
        return []


def kubeconfig_problem(path: str) -> str:
    """What is wrong with a kubeconfig file for the portal to reach a cluster with, or "". The
    file's content is never quoted back (it may be any file the server can read)."""
    try:
        names = _contexts(path)
    except UNREADABLE:
        names = []
    if not names:
        return (
            f"{path} is not a kubeconfig the portal can read: a YAML file of at most "
            f"{KUBECONFIG_MAX_BYTES // 1024} KiB with clusters, users and contexts."
        )
    return ""
