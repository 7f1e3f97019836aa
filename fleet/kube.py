"""The one module that talks to Kubernetes: a rate-limited, retrying client per Cluster.

Everything else in the portal calls `client_for(cluster)` and works with plain dicts. Errors are
classified once, here: `TransientError` (connection trouble, 429, 5xx, races worth retrying) and
`PermanentError` (the API refused the request: 400, 403, 404 where it matters, 422 ...), both
carrying what the API server said.
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import urllib3
from django.conf import settings
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.config.config_exception import ConfigException

logger = logging.getLogger(__name__)

FIELD_MANAGER = "quartermaster"
USER_AGENT = "quartermaster/1.0"
APPLY_CONTENT_TYPE = "application/apply-patch+yaml"
MERGE_PATCH_CONTENT_TYPE = "application/merge-patch+json"
# (connect, read) seconds; watches pass their own read timeout.
REQUEST_TIMEOUT = (5.0, 30.0)
LIST_PAGE_SIZE = 500


class KubeError(Exception):
    """What the Kubernetes API (or the way to it) said about a failed request."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        reason: str = "",
        causes: list[dict] | None = None,
    ):
        self.status = status
        self.reason = reason
        self.message = message
        self.causes = list(causes or [])
        super().__init__(self.describe())

    def describe(self) -> str:
        """One line a person can act on: status, reason, message, and each field cause."""
        head = " ".join(str(part) for part in (self.status, self.reason) if part)
        text = f"{head}: {self.message}" if head else self.message
        fields = [
            f"{c.get('field')}: {c.get('message', '')}"
            for c in self.causes
            if c.get("field") and c.get("field") not in self.message
        ]
        if fields:
            text += " (" + "; ".join(fields) + ")"
        return text


class TransientError(KubeError):
    """Worth retrying later: the cluster was unreachable, overloaded or raced us."""


class PermanentError(KubeError):
    """Retrying will not help: the request is wrong or not allowed."""


class ResourceExpired(TransientError):
    """A watch's resourceVersion is too old (410 Gone): list again, then watch from there."""


class ConfigurationError(PermanentError):
    """The Cluster row does not lead to a usable client configuration."""


# Status codes whose meaning does not depend on the request.
_TRANSIENT_STATUS = {408, 429, 500, 502, 503, 504}


def error_from_response(status: int, body: bytes | str | None, *, conflict_is_transient=False):
    """Build the right KubeError from an HTTP status and a (Status) body."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else (body or "")
    reason, message, causes = "", "", []
    try:
        payload = json.loads(text) if text else {}
    except ValueError:
        payload = {}
    if isinstance(payload, dict) and payload.get("kind") == "Status":
        reason = payload.get("reason") or ""
        message = payload.get("message") or ""
        causes = (payload.get("details") or {}).get("causes") or []
    if not message:
        message = text.strip()[:500] or f"HTTP {status}"
    if status == 410:
        cls = ResourceExpired
    elif status in _TRANSIENT_STATUS or status >= 500 or (status == 409 and conflict_is_transient):
        cls = TransientError
    else:
        cls = PermanentError
    return cls(message, status=status, reason=reason or _default_reason(status), causes=causes)


def _default_reason(status: int) -> str:
    return {
        400: "BadRequest",
        401: "Unauthorized",
        403: "Forbidden",
        404: "NotFound",
        409: "Conflict",
        410: "Expired",
        422: "Invalid",
        429: "TooManyRequests",
    }.get(status, "InternalError" if status >= 500 else "")


class TokenBucket:
    """A thread-safe token bucket; rate and burst are read on every call (settings may change)."""

    def __init__(
        self,
        rate: Callable[[], float],
        burst: Callable[[], int],
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self._rate = rate
        self._burst = burst
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._tokens: float | None = None
        self._stamp = clock()

    def acquire(self) -> float:
        """Take one token, sleeping until one is available; returns the seconds waited."""
        waited = 0.0
        while True:
            with self._lock:
                rate, burst = float(self._rate()), max(1, int(self._burst()))
                if rate <= 0:
                    return waited
                now = self._clock()
                tokens = burst if self._tokens is None else self._tokens
                tokens = min(burst, tokens + (now - self._stamp) * rate)
                self._stamp = now
                if tokens >= 1:
                    self._tokens = tokens - 1
                    return waited
                self._tokens = tokens
                delay = (1 - tokens) / rate
            # Sleep outside the lock so other threads can refill and check too.
            self._sleep(delay)
            waited += delay


@dataclass(frozen=True)
class ApiResource:
    """Where a kind lives in the REST API."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool

    def path(self, *, namespace: str | None = None, name: str | None = None) -> str:
        base = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name:
            base += f"/{quote(name, safe='')}"
        return base


class KubeClient:
    """A client for one cluster: discovery cache, token bucket, retries, plain-dict results."""

    def __init__(
        self,
        api_client: k8s_client.ApiClient,
        *,
        name: str = "",
        max_attempts: int | None = None,
        backoff_base: float = 0.25,
        backoff_max: float = 8.0,
    ):
        self.api_client = api_client
        self.name = name
        self.max_attempts = max_attempts
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.bucket = TokenBucket(
            lambda: getattr(settings, "KUBE_QPS", 50.0),
            lambda: getattr(settings, "KUBE_BURST", 100),
        )
        self._resources: dict[str, dict[str, ApiResource]] = {}
        self._discovery_lock = threading.Lock()

    def __repr__(self):
        return f"<KubeClient {self.name} {self.api_client.configuration.host}>"

    @property
    def host(self) -> str:
        return self.api_client.configuration.host

    def close(self) -> None:
        self.api_client.close()

    # --- the verbs everyone uses -------------------------------------------------------------

    def apply(
        self,
        manifest: dict,
        *,
        force: bool = True,
        field_manager: str = FIELD_MANAGER,
        dry_run: bool = False,
        field_validation: str | None = None,
    ) -> dict:
        """Server-side apply one object; returns the object as the API server stored it.

        dry_run asks the server what it would store without storing it; field_validation
        ("Strict", "Warn", "Ignore") overrides the server's default (Warn: unknown fields are
        dropped and reported in a Warning header, which is logged).
        """
        api_version, kind, meta = _identity(manifest)
        name = meta.get("name")
        if not name:
            raise PermanentError(f"{kind} has no metadata.name", status=None, reason="Invalid")
        resource = self.resource(api_version, kind)
        namespace = meta.get("namespace") if resource.namespaced else None
        if resource.namespaced and not namespace:
            raise PermanentError(f"{kind} {name} needs metadata.namespace", reason="Invalid")
        query = [("fieldManager", field_manager)]
        if force:
            query.append(("force", "true"))
        if dry_run:
            query.append(("dryRun", "All"))
        if field_validation:
            query.append(("fieldValidation", field_validation))
        # With force, a 409 is a create/update race, gone on the next try; without force it is
        # another manager owning a field we set, which only a person can resolve.
        return self._json(
            "PATCH",
            resource.path(namespace=namespace, name=name),
            query=query,
            body=manifest,
            content_type=APPLY_CONTENT_TYPE,
            conflict_is_transient=force,
        )

    def patch(
        self,
        api_version: str,
        kind: str,
        name: str,
        patch: dict,
        namespace: str | None = None,
        *,
        subresource: str = "",
    ) -> dict:
        """JSON merge patch (no resourceVersion, so a 409 is a race worth retrying)."""
        resource = self.resource(api_version, kind)
        path = resource.path(namespace=namespace, name=name)
        if subresource:
            path += f"/{subresource}"
        return self._json(
            "PATCH",
            path,
            query=[("fieldManager", FIELD_MANAGER)],
            body=patch,
            content_type=MERGE_PATCH_CONTENT_TYPE,
            conflict_is_transient=True,
        )

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None):
        """The object, or None when it does not exist."""
        resource = self.resource(api_version, kind)
        try:
            return self._json("GET", resource.path(namespace=namespace, name=name))
        except PermanentError as exc:
            if exc.status == 404:
                return None
            raise

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[dict]:
        """Every matching object (all pages), each with apiVersion and kind filled in."""
        resource = self.resource(api_version, kind)
        path = resource.path(namespace=namespace)
        items: list[dict] = []
        token = None
        while True:
            query = [("limit", str(LIST_PAGE_SIZE))]
            if label_selector:
                query.append(("labelSelector", label_selector))
            if field_selector:
                query.append(("fieldSelector", field_selector))
            if token:
                query.append(("continue", token))
            page = self._json("GET", path, query=query)
            for item in page.get("items") or []:
                item.setdefault("apiVersion", api_version)
                item.setdefault("kind", kind)
                items.append(item)
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items

    def delete(
        self,
        api_version: str,
        kind: str,
        name: str,
        namespace: str | None = None,
        *,
        propagation_policy: str = "Background",
    ) -> bool:
        """Delete one object (dependents in the background); False when it was already gone."""
        resource = self.resource(api_version, kind)
        try:
            self._json(
                "DELETE",
                resource.path(namespace=namespace, name=name),
                query=[("propagationPolicy", propagation_policy)],
                conflict_is_transient=True,
            )
        except PermanentError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def raw_get(self, path: str, query: dict | None = None) -> dict:
        """GET any API path (e.g. the Kueue visibility API) as JSON."""
        return self._json("GET", path, query=list((query or {}).items()))

    def watch(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        timeout_seconds: int = 60,
        allow_bookmarks: bool = True,
    ) -> Iterator[dict]:
        """Yield watch events {"type", "object"} until the server ends the watch.

        An ERROR event raises (ResourceExpired for 410: list again and watch from there); a
        broken stream raises TransientError.
        """
        resource = self.resource(api_version, kind)
        query = [("watch", "true"), ("timeoutSeconds", str(int(timeout_seconds)))]
        if allow_bookmarks:
            query.append(("allowWatchBookmarks", "true"))
        if resource_version:
            query.append(("resourceVersion", str(resource_version)))
        if label_selector:
            query.append(("labelSelector", label_selector))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        response = self._request(
            "GET",
            resource.path(namespace=namespace),
            query=query,
            timeout=(REQUEST_TIMEOUT[0], timeout_seconds + 10),
            stream=True,
        )
        try:
            buffer = b""
            for chunk in response.stream(4096, decode_content=True):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        yield _watch_event(line)
            if buffer.strip():
                yield _watch_event(buffer)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise TransientError(f"watch of {kind} broke off: {exc}", reason="Connection") from exc
        finally:
            response.release_conn()

    # --- discovery ---------------------------------------------------------------------------

    def resource(self, api_version: str, kind: str) -> ApiResource:
        """The REST resource for a kind, from the server's discovery (cached per group/version)."""
        found = self._discover(api_version).get(kind)
        if found is None:
            # A CRD may have been installed since we looked: ask once more before giving up.
            found = self._discover(api_version, refresh=True).get(kind)
        if found is None:
            raise PermanentError(
                f"The cluster does not serve kind {kind} in {api_version} "
                "(is the CRD installed, and is the API version right?)",
                status=404,
                reason="NotFound",
            )
        return found

    def _discover(self, api_version: str, *, refresh: bool = False) -> dict[str, ApiResource]:
        with self._discovery_lock:
            cached = self._resources.get(api_version)
        if cached is not None and not refresh:
            return cached
        path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        try:
            listing = self._json("GET", path)
        except PermanentError as exc:
            if exc.status != 404:
                raise
            listing = {}
        kinds = {}
        for entry in listing.get("resources") or []:
            if "/" in entry.get("name", ""):
                continue  # subresources such as clusterqueues/status
            kinds[entry["kind"]] = ApiResource(
                api_version=api_version,
                kind=entry["kind"],
                plural=entry["name"],
                namespaced=bool(entry.get("namespaced")),
            )
        with self._discovery_lock:
            self._resources[api_version] = kinds
        return kinds

    # --- transport ---------------------------------------------------------------------------

    def _attempts(self) -> int:
        if self.max_attempts is not None:
            return self.max_attempts
        return int(getattr(settings, "KUBE_MAX_ATTEMPTS", 5))

    def _json(self, method, path, *, query=None, body=None, content_type=None, **kwargs) -> dict:
        response = self._request(
            method, path, query=query, body=body, content_type=content_type, **kwargs
        )
        data = response.data
        if not data:
            return {}
        try:
            return json.loads(data)
        except ValueError as exc:
            raise PermanentError(
                f"{method} {path} answered something that is not JSON", status=response.status
            ) from exc

    def _request(
        self,
        method: str,
        path: str,
        *,
        query: list | None = None,
        body: Any = None,
        content_type: str | None = None,
        timeout: tuple | None = None,
        stream: bool = False,
        conflict_is_transient: bool = False,
    ):
        """Send one request with rate limiting and retries; returns the urllib3 response."""
        attempts = max(1, self._attempts())
        for attempt in range(1, attempts + 1):
            try:
                return self._send_once(
                    method,
                    path,
                    query=query,
                    body=body,
                    content_type=content_type,
                    timeout=timeout,
                    stream=stream,
                    conflict_is_transient=conflict_is_transient,
                )
            except ResourceExpired:
                raise
            except TransientError as exc:
                if attempt >= attempts:
                    raise
                delay = self._backoff(attempt, exc)
                logger.warning(
                    "kube %s %s %s failed (%s); retry %d/%d in %.2fs",
                    self.name,
                    method,
                    path,
                    exc,
                    attempt,
                    attempts - 1,
                    delay,
                )
                time.sleep(delay)
        raise AssertionError("unreachable")

    def _backoff(self, attempt: int, exc: TransientError) -> float:
        retry_after = getattr(exc, "retry_after", None)
        delay = min(self.backoff_max, self.backoff_base * (2 ** (attempt - 1)))
        if retry_after:
            delay = max(delay, min(retry_after, self.backoff_max))
        # Full jitter keeps many workers from retrying in lock step.
        return delay / 2 + random.uniform(0, delay / 2)

    def _send_once(
        self, method, path, *, query, body, content_type, timeout, stream, conflict_is_transient
    ):
        self.bucket.acquire()
        headers = {"Accept": "application/json"}
        if body is not None or method in ("PATCH", "POST", "PUT"):
            headers["Content-Type"] = content_type or "application/json"
        api = self.api_client
        request = api.param_serialize(
            method,
            path,
            query_params=list(query or []),
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        try:
            response = api.call_api(*request, _request_timeout=timeout or REQUEST_TIMEOUT)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise TransientError(
                f"cannot reach the Kubernetes API at {self.host}: {exc}", reason="Connection"
            ) from exc
        raw = response.response
        if 200 <= response.status <= 299:
            warning = raw.headers.get("Warning")
            if warning:
                logger.warning("kube %s %s %s: %s", self.name, method, path, warning)
            if stream:
                return raw
            try:
                response.read()
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                raise TransientError(
                    f"reading the answer from {self.host} failed: {exc}", reason="Connection"
                ) from exc
            return response
        try:
            payload = response.read()
        except (urllib3.exceptions.HTTPError, OSError):
            payload = b""
        error = error_from_response(
            response.status, payload, conflict_is_transient=conflict_is_transient
        )
        retry_after = raw.headers.get("Retry-After") if raw is not None else None
        if retry_after and retry_after.isdigit():
            error.retry_after = int(retry_after)
        raise error


def _identity(manifest: dict) -> tuple[str, str, dict]:
    api_version, kind = manifest.get("apiVersion"), manifest.get("kind")
    if not api_version or not kind:
        raise PermanentError("A manifest needs apiVersion and kind", reason="Invalid")
    return api_version, kind, manifest.get("metadata") or {}


def _watch_event(line: bytes) -> dict:
    try:
        event = json.loads(line)
    except ValueError as exc:
        raise TransientError(f"unreadable watch event: {line[:200]!r}") from exc
    if event.get("type") == "ERROR":
        status = event.get("object") or {}
        raise error_from_response(int(status.get("code") or 500), json.dumps(status))
    return event


# --- one client per cluster ------------------------------------------------------------------

_clients: dict[Any, KubeClient] = {}
_clients_lock = threading.Lock()


def _cache_key(cluster) -> tuple:
    path = cluster.kubeconfig_path or ""
    try:
        # A rewritten kubeconfig (e.g. kubesim restarted on another port) means a new client.
        mtime = os.stat(path).st_mtime_ns if path and not cluster.in_cluster else None
    except OSError:
        mtime = None
    return (cluster.pk, cluster.name, bool(cluster.in_cluster), path, cluster.context or "", mtime)


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
    created = KubeClient(api, name=cluster.name)
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
    for kube in clients:
        kube.close()


def kubeconfig_contexts(path: str) -> list[str]:
    """The context names in a kubeconfig file (for form validation); [] when unreadable."""
    try:
        contexts, _ = k8s_config.list_kube_config_contexts(config_file=path)
    except (ConfigException, OSError, ValueError, TypeError):
        return []
    return [c["name"] for c in contexts or []]
