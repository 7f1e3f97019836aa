"""KubeClient: discovery, rate limit, retries with backoff, and plain-dict results."""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import urllib3
from django.conf import settings
from kubernetes import client as k8s_client

from core.metrics import KUBE_ERRORS, KUBE_RETRIES
from fleet.kube import inflight
from fleet.kube.errors import PermanentError, ResourceExpired, TransientError, error_from_response
from fleet.kube.health import ClusterBusy, ClusterHealth, ClusterUnavailable
from fleet.kube.ratelimit import SharedRateLimit, TokenBucket

logger = logging.getLogger(__name__)

FIELD_MANAGER = "quartermaster"
USER_AGENT = "quartermaster/1.0"
APPLY_CONTENT_TYPE = "application/apply-patch+yaml"
MERGE_PATCH_CONTENT_TYPE = "application/merge-patch+json"
# (connect, read) seconds; watches pass their own read timeout. Bounded, so that a cluster that
# hangs costs a worker this long once, after which its breaker answers for it (kube.health).
REQUEST_TIMEOUT = (3.0, 10.0)
# The next try of a cluster that did not answer: a small request, so a short wait.
PROBE_TIMEOUT = (2.0, 2.0)
LIST_PAGE_SIZE = 500


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


# Callables told of every request (method, path, query, content type) before it is sent: the
# tests record the (group, resource, verb) triples the portal uses to check the deployment's
# ClusterRole.
REQUEST_RECORDERS: list = []
_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


def request_rbac(method: str, path: str, query=None, content_type=None) -> list[tuple[str, ...]]:
    """The RBAC (API group, resource[/subresource], verb) triples a request needs: none for
    discovery and /version, which every authenticated client may read; a server-side apply,
    which creates the object when it is missing, is authorized as patch and as create; writing
    a RoleBinding also needs `bind` on the role it names."""
    parts = [p for p in path.split("?")[0].split("/") if p]
    if parts[:1] == ["api"] and len(parts) >= 2:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, rest = parts[1], parts[3:]
    else:
        return []
    if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) > 2:
        rest = rest[2:]
    if not rest:
        return []
    resource, name, sub = rest[0], rest[1] if len(rest) > 1 else "", rest[2:3]
    if sub:
        resource = f"{resource}/{sub[0]}"
    if method == "GET":
        watching = any(k == "watch" and v in ("true", "1") for k, v in (query or []))
        verb = "watch" if watching else ("get" if name else "list")
    else:
        verb = _VERBS.get(method, method.lower())
    triples = [(group, resource, verb)]
    if verb == "patch" and content_type == APPLY_CONTENT_TYPE:
        triples.append((group, resource, "create"))
    if resource == "rolebindings" and verb in ("patch", "create"):
        # Binding a role the client does not hold itself needs `bind` on that role.
        triples.append(("rbac.authorization.k8s.io", "clusterroles", "bind"))
    return triples


def rate_limit_for(cluster_id: int | None, name: str) -> TokenBucket | SharedRateLimit:
    """KUBE_QPS and KUBE_BURST: shared by every process of this portal for a registered
    cluster where KUBE_RATE_LIMIT_URL names a storage, else per process."""

    def qps() -> float:
        return settings.KUBE_QPS

    def burst() -> int:
        return settings.KUBE_BURST

    local = TokenBucket(qps, burst)
    url = settings.KUBE_RATE_LIMIT_URL
    if not url or cluster_id is None:
        return local
    # Two portals may share a Redis: the key names this one by its database.
    key = f"{settings.DATABASES['default']['NAME']}:{cluster_id}"
    return SharedRateLimit(key, url, local, qps, burst)


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
        health: ClusterHealth | None = None,
    ):
        self.api_client = api_client
        self.name = name
        self.max_attempts = max_attempts
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.health = health or ClusterHealth(None, name)
        self.bucket = rate_limit_for(self.health.cluster_id, name)
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

    def probe(self) -> bool:
        """Whether the API server answers now: one GET /version with short timeouts, past the
        breaker (this is how its next try is made); the answer or the failure is recorded."""
        try:
            self._send_once(
                "GET", "/version", query=None, body=None, content_type=None,
                timeout=PROBE_TIMEOUT, stream=False, conflict_is_transient=False,
            )  # fmt: skip
        except TransientError:
            return False
        except PermanentError:  # it answered (a 403, say): reachable
            return True
        return True

    def pod_log(
        self, namespace: str, name: str, *, container: str | None = None,
        tail: int | None = None, timestamps: bool = False, follow: bool = False,
    ):  # fmt: skip
        """A pod's log: the text, or with follow an iterator of byte chunks until it ends.
        A pod that has not started answers 400 (PermanentError), as on a real cluster."""
        query = []
        if container:
            query.append(("container", container))
        if tail is not None:
            query.append(("tailLines", str(int(tail))))
        if timestamps:
            query.append(("timestamps", "true"))
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}/log"
        if not follow:
            return self._request("GET", path, query=query).data.decode("utf-8", "replace")
        query.append(("follow", "true"))
        response = self._request(
            "GET", path, query=query, stream=True, timeout=(REQUEST_TIMEOUT[0], 300)
        )

        def chunks():
            try:
                yield from response.stream(4096, decode_content=True)
            except (urllib3.exceptions.HTTPError, OSError):
                return
            finally:
                response.release_conn()

        return chunks()

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
        return int(settings.KUBE_MAX_ATTEMPTS)

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
        for record in REQUEST_RECORDERS:
            record(method, path, query, content_type)
        attempts = max(1, self._attempts())
        for attempt in range(1, attempts + 1):
            # An open breaker answers at once: no request, no sleeping between retries.
            self.health.check()
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
            except (ResourceExpired, ClusterUnavailable):
                raise
            except TransientError as exc:
                # A cluster that did not answer is not asked again now: its breaker is open.
                if attempt >= attempts or self.health.is_open():
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
                KUBE_RETRIES.labels(self.name).inc()
                time.sleep(delay)
        raise AssertionError("unreachable")

    def _enter_inflight(self):
        """Register this request as in flight; ClusterBusy when another request to the cluster
        waits unanswered past its patience (then this one is not sent)."""
        entry = inflight.enter(
            self.health.cluster_id, patience=inflight.patience_for(self.health.latency_ms)
        )
        if isinstance(entry, inflight.Overdue):
            raise ClusterBusy(
                f"cluster {self.name} has not answered a request sent {entry.waited:.1f} s ago; "
                "another worker is waiting on it, so it is not asked now",
                reason="Busy",
            )
        return entry

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
        timeout = timeout or REQUEST_TIMEOUT
        # Streams wait by design; every other request is registered while in flight, so that
        # one worker at most waits on a cluster that stopped answering (fleet.kube.inflight).
        entry = None if stream else self._enter_inflight()
        if isinstance(entry, inflight.Entry) and not entry.patient:
            timeout = tuple(min(t, entry.patience) for t in timeout)
        started = time.monotonic()
        try:
            response = api.call_api(*request, _request_timeout=timeout)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            inflight.leave(entry, answered=False)
            if _timed_out(exc) and isinstance(entry, inflight.Entry) and not entry.patient:
                raise ClusterBusy(
                    f"cluster {self.name} did not answer within {entry.patience:.1f} s while "
                    "another request to it was waiting too; not asked again now",
                    reason="Busy",
                ) from exc
            error = TransientError(
                f"cannot reach the Kubernetes API at {self.host}: {exc}", reason="Connection"
            )
            self.health.failed(error, unreachable=True)
            KUBE_ERRORS.labels(self.name, "unreachable").inc()
            raise error from exc
        inflight.leave(entry, answered=True)
        raw = response.response
        if response.status < 500:  # it answered; a 5xx is recorded with the error below
            self.health.succeeded(time.monotonic() - started)
        if 200 <= response.status <= 299:
            warning = raw.headers.get("Warning")
            if warning:
                logger.warning("kube %s %s %s: %s", self.name, method, path, warning)
            if stream:
                return raw
            try:
                response.read()
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                error = TransientError(
                    f"reading the answer from {self.host} failed: {exc}", reason="Connection"
                )
                self.health.failed(error, unreachable=True)
                KUBE_ERRORS.labels(self.name, "unreachable").inc()
                raise error from exc
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
        if isinstance(error, TransientError):
            self.health.failed(error, unreachable=False)
        KUBE_ERRORS.labels(self.name, str(response.status)).inc()
        raise error


def _timed_out(exc: BaseException) -> bool:
    """A connect or read timeout, however urllib3 wrapped it."""
    while exc is not None:
        if isinstance(exc, (urllib3.exceptions.TimeoutError, TimeoutError)):
            return True
        exc = getattr(exc, "reason", None) or exc.__cause__ or exc.__context__
    return False


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
