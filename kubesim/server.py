"""The HTTP/1.1 API server: discovery, CRUD, patch and apply, watches, Status errors."""

from __future__ import annotations

import contextlib
import json
import logging
import select
import socket
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

from kubesim import apply as ssa
from kubesim import resources
from kubesim.clock import Clock
from kubesim.controllers import start as start_controllers
from kubesim.resources import ResourceType
from kubesim.schema import Schemas
from kubesim.store import (
    ApiError,
    BadRequest,
    Expired,
    MethodNotAllowed,
    NotFound,
    Store,
    UnsupportedMediaType,
    decode_continue,
    encode_continue,
    from_storage,
    invalid,
    not_found,
    now_rfc3339,
    parse_field_selector,
    parse_label_selector,
)

log = logging.getLogger("kubesim.server")

KUBERNETES_VERSION = {"major": "1", "minor": "34", "gitVersion": "v1.34.0-kubesim"}
VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"
VISIBILITY_VERSIONS = ("v1beta2", "v1beta1")
CUSTOM_GROUPS = (resources.KUEUE, resources.VOLCANO_SCHED, resources.VOLCANO_BATCH)
VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
MAX_WATCH_SECONDS = 1800
BOOKMARK_EVERY = 10.0
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# Metadata a client may not set; the server owns it.
_SERVER_METADATA = (
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
)


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _status_success(rt: ResourceType, obj: dict) -> dict:
    meta = obj.get("metadata") or {}
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {
            "name": meta.get("name"),
            "group": rt.group,
            "kind": rt.plural,
            "uid": meta.get("uid"),
        },
    }


# ------------------------------------------------------------------------------------ discovery


def _resource_list(group: str, version: str) -> dict:
    entries = []
    for rt in resources.in_group_version(group, version):
        entry = {
            "name": rt.plural,
            "singularName": rt.singular_name,
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": VERBS,
        }
        if rt.short_names:
            entry["shortNames"] = list(rt.short_names)
        if rt.categories:
            entry["categories"] = list(rt.categories)
        entries.append(entry)
        for sub in rt.subresources:
            entries.append(
                {
                    "name": f"{rt.plural}/{sub}",
                    "singularName": "",
                    "namespaced": rt.namespaced,
                    "kind": rt.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": entries,
    }


def _visibility_resource_list(version: str) -> dict:
    def entry(name: str, kind: str, namespaced: bool) -> dict:
        return {
            "name": name,
            "singularName": "" if "/" in name else kind.lower(),
            "namespaced": namespaced,
            "kind": kind,
            "verbs": ["get"],
        }

    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{VISIBILITY_GROUP}/{version}",
        "resources": [
            entry("clusterqueues", "ClusterQueue", False),
            entry("clusterqueues/pendingworkloads", "PendingWorkloadsSummary", False),
            entry("localqueues", "LocalQueue", True),
            entry("localqueues/pendingworkloads", "PendingWorkloadsSummary", True),
        ],
    }


def _api_group(name: str, versions: list[str]) -> dict:
    gvs = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": gvs, "preferredVersion": gvs[0]}


def _group_list() -> dict:
    groups = [_api_group(g, vs) for g, vs in resources.group_versions().items()]
    groups.append(_api_group(VISIBILITY_GROUP, list(VISIBILITY_VERSIONS)))
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


# ---------------------------------------------------------------------------------------- server


class ApiServer:
    """kubesim's API server: a store, optional CRD schemas, and a threaded HTTP server."""

    def __init__(
        self,
        store: Store,
        *,
        schemas: Schemas | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ):
        self.store = store
        self.schemas = schemas or Schemas()
        store.field_tracker = self._track_fields
        self.stopping = threading.Event()
        self.httpd = _HTTPServer((host, port), _Handler)
        self.httpd.api = self
        self.host, self.port = self.httpd.server_address[:2]
        self._thread: threading.Thread | None = None
        self._serving = False
        self._discovery_cache: dict[str, bytes] = {}
        self._faults: list[dict] = []
        self._faults_lock = threading.Lock()
        # A frozen server reads each request and then holds it without a word (a cluster that
        # hangs: the connection is accepted, no answer comes) until thawed.
        self._frozen: tuple[str, ...] = ()
        self._thawed = threading.Condition()
        self.held = 0

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _track_fields(self, rt: ResourceType, old: dict, new: dict, manager: str) -> None:
        """Record a controller's write in managedFields, as the API server would."""
        meta = new["metadata"]
        if meta.get("managedFields") != old["metadata"].get("managedFields"):
            return  # the writer sent managedFields of its own: keep them
        ssa.record_update(
            old,
            new,
            manager=manager,
            api_version=rt.api_version,
            now=now_rfc3339(self.store.clock()),
            keys_for=self.schemas.keys_for(rt),
            has_status=rt.has_status,
        )

    def start(self) -> ApiServer:
        """Serve in a background thread."""
        self._serving = True
        self._thread = threading.Thread(
            target=self.serve_forever, name=f"kubesim-api-{self.port}", daemon=True
        )
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve in this thread until stop() is called from another one."""
        self._serving = True
        self.httpd.serve_forever(poll_interval=0.05)

    def stop(self) -> None:
        """Stop serving; open watches end within a fraction of a second."""
        self.stopping.set()
        self.thaw()
        if self._serving:
            self.httpd.shutdown()
        self.httpd.server_close()
        self.httpd.close_connections()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def reset(self, store: Store) -> None:
        """Serve another store, forget injected faults, thaw (see freeze) and hang up on every
        client (watches of the old store end with their connections): Cluster.reset."""
        self.store = store
        store.field_tracker = self._track_fields
        with self._faults_lock:
            self._faults = []
        self.thaw()
        self.httpd.close_connections()

    def inject_faults(
        self,
        count: int,
        *,
        methods: tuple[str, ...] = ("POST", "PUT", "PATCH", "DELETE"),
        code: int = 500,
        message: str = "etcdserver: request timed out",
        retry_after: int | None = None,
        path: str = "",
    ) -> None:
        """Answer the next `count` requests with these methods (and, given `path`, whose path
        contains it) with an error Status (tests)."""
        reasons = {
            403: "Forbidden",
            422: "Invalid",
            429: "TooManyRequests",
            500: "InternalError",
            503: "ServiceUnavailable",
            504: "Timeout",
        }
        with self._faults_lock:
            self._faults.append(
                {
                    "count": count,
                    "methods": methods,
                    "code": code,
                    "reason": reasons.get(code, "InternalError"),
                    "message": message,
                    "retry_after": retry_after,
                    "path": path,
                }
            )

    def take_fault(self, method: str, path: str = "") -> dict | None:
        """The injected fault for a request, if one is pending."""
        if not self._faults:
            return None
        with self._faults_lock:
            for fault in self._faults:
                if method not in fault["methods"] or fault["path"] not in path:
                    continue
                if fault["count"] > 0:
                    fault["count"] -= 1
                    return fault
            self._faults = [f for f in self._faults if f["count"] > 0]
        return None

    def freeze(self, methods: tuple[str, ...] = ("GET", "POST", "PUT", "PATCH", "DELETE")) -> None:
        """Hold every request with these methods, unanswered, until thaw() (tests and benches:
        a cluster that accepts connections and never answers). Requests already being served,
        watches among them, go on."""
        with self._thawed:
            self._frozen = tuple(methods)

    def thaw(self) -> None:
        """Answer the held requests and those that follow."""
        with self._thawed:
            self._frozen = ()
            self._thawed.notify_all()

    def hold_if_frozen(self, method: str) -> None:
        """Called by the handler before a request is served: wait while frozen."""
        if method not in self._frozen:
            return
        with self._thawed:
            self.held += 1
            try:
                while method in self._frozen and not self.stopping.is_set():
                    self._thawed.wait(0.5)
            finally:
                self.held -= 1

    def discovery(self, key: str, build: Any) -> bytes:
        body = self._discovery_cache.get(key)
        if body is None:
            body = self._discovery_cache[key] = _dumps(build())
        return body


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128
    api: ApiServer

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._connections_lock:
                self._connections.discard(request)

    def close_connections(self) -> None:
        """Hang up on keep-alive clients so that their handler threads end."""
        with self._connections_lock:
            connections = list(self._connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "kubesim"
    disable_nagle_algorithm = True
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        log.debug("%s " + format, self.address_string(), *args)

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def do_HEAD(self) -> None:
        self._handle("HEAD")

    def do_OPTIONS(self) -> None:
        self._handle("OPTIONS")

    # ---- plumbing

    def _send(
        self,
        code: int,
        body: bytes,
        content_type: str = "application/json",
        headers: list[tuple[str, str]] | None = None,
    ) -> None:
        try:
            phrase = HTTPStatus(code).phrase
        except ValueError:
            phrase = ""
        head = [
            f"HTTP/1.1 {code} {phrase}",
            f"Content-Type: {content_type}",
            f"Content-Length: {len(body)}",
            "Cache-Control: no-cache, private",
        ]
        for key, value in headers or ():
            head.append(f"{key}: {value}")
        if self.close_connection:
            head.append("Connection: close")
        self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)

    def _send_json(self, code: int, obj: Any, warnings: list[str] | None = None) -> None:
        headers = [("Warning", f"299 - {json.dumps(w)}") for w in warnings or ()]
        self._send(code, _dumps(obj), headers=headers)

    def _read_body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            raise BadRequest("invalid Content-Length") from None
        return self.rfile.read(length) if length > 0 else b""

    def _handle(self, method: str) -> None:
        body = b""
        try:
            body = self._read_body()
            self.server.api.hold_if_frozen(method)
            fault = self.server.api.take_fault(method, self.path)
            if fault is not None:
                return self._send_fault(fault)
            url = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
            parts = [unquote(p) for p in url.path.split("/") if p]
            self._route(method, parts, query, body)
        except ApiError as err:
            self._send_json(err.code, err.status())
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # a bug in kubesim: answer like an API server would
            log.exception("internal error handling %s %s", method, self.path)
            err = ApiError(f"kubesim internal error: {exc!r}")
            self._send_json(500, err.status())

    def _send_fault(self, fault: dict) -> None:
        status = ApiError(fault["message"]).status()
        status.update(code=fault["code"], reason=fault["reason"])
        headers = [("Retry-After", str(fault["retry_after"]))] if fault["retry_after"] else []
        self._send(fault["code"], _dumps(status), headers=headers)

    # ---- routing

    def _route(self, method: str, parts: list[str], query: dict, body: bytes) -> None:
        api = self.server.api
        if not parts:
            paths = [
                "/api",
                "/api/v1",
                "/apis",
                "/healthz",
                "/livez",
                "/readyz",
                "/version",
                "/metrics/dcgm",
            ]
            return self._send_json(200, {"paths": paths})
        head = parts[0]
        if head in ("healthz", "livez", "readyz"):
            return self._send(200, b"ok", "text/plain; charset=utf-8")
        if head == "version":
            return self._send_json(
                200,
                {
                    **KUBERNETES_VERSION,
                    "gitCommit": "kubesim",
                    "gitTreeState": "clean",
                    "buildDate": "",
                    "goVersion": "python",
                    "compiler": "kubesim",
                    "platform": "linux/amd64",
                },
            )
        if head == "metrics" and parts[1:2] == ["dcgm"] and len(parts) <= 3:
            return self._dcgm(parts[2] if len(parts) == 3 else None)
        if head == "kubesim" and parts[1:] == ["gpu-faults"] and method == "POST":
            return self._gpu_fault(query)
        if head == "api":
            if len(parts) == 1:
                return self._send_json(
                    200,
                    {
                        "kind": "APIVersions",
                        "versions": ["v1"],
                        "serverAddressByClientCIDRs": [
                            {"clientCIDR": "0.0.0.0/0", "serverAddress": f"{api.host}:{api.port}"}
                        ],
                    },
                )
            if parts[1] != "v1":
                raise NotFound("the server could not find the requested resource")
            if len(parts) == 2:
                return self._send(200, api.discovery("/api/v1", lambda: _resource_list("", "v1")))
            return self._resource(method, "", "v1", parts[2:], query, body)
        if head == "apis":
            if len(parts) == 1:
                return self._send(200, api.discovery("/apis", _group_list))
            group = parts[1]
            if group == VISIBILITY_GROUP:
                return self._visibility(method, parts[2:], query)
            versions = resources.group_versions().get(group)
            if versions is None:
                raise NotFound("the server could not find the requested resource")
            if len(parts) == 2:
                return self._send_json(
                    200, {"kind": "APIGroup", "apiVersion": "v1", **_api_group(group, versions)}
                )
            version = parts[2]
            if version not in versions:
                raise NotFound("the server could not find the requested resource")
            if len(parts) == 3:
                key = f"/apis/{group}/{version}"
                return self._send(200, api.discovery(key, lambda: _resource_list(group, version)))
            return self._resource(method, group, version, parts[3:], query, body)
        if head == "openapi":
            raise NotFound("kubesim does not serve OpenAPI documents")
        raise NotFound("the server could not find the requested resource")

    def _resource(
        self, method: str, group: str, version: str, rest: list[str], query: dict, body: bytes
    ) -> None:
        watch = False
        if rest and rest[0] == "watch":
            watch, rest = True, rest[1:]
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            candidate = resources.get(group, version, rest[2])
            if candidate is not None and candidate.namespaced:
                namespace, rest = rest[1], rest[2:]
        if not rest:
            raise NotFound("the server could not find the requested resource")
        rt = resources.get(group, version, rest[0])
        if rt is None:
            raise NotFound("the server could not find the requested resource")
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if name and "/" in name:  # a client that escaped "name/subresource" as one segment
            name, sub = name.split("/", 1)
        if rt is resources.PODS and sub == "log" and len(rest) == 3:
            if method != "GET":
                raise MethodNotAllowed(f"{method} is not supported on pods/log")
            return self._pod_log(namespace, name, query)
        if len(rest) > 3 or (sub is not None and sub not in rt.subresources):
            raise NotFound("the server could not find the requested resource")
        if rt.namespaced and name is None and namespace is None and method not in ("GET",):
            raise MethodNotAllowed(f"{method} is not supported on all namespaces for {rt}")
        handler = _Operation(self, rt, namespace, name, sub, query, body)
        if watch or (method == "GET" and name is None and _truthy(query.get("watch"))):
            return handler.watch()
        verb = {
            ("GET", False): handler.list,
            ("GET", True): handler.get,
            ("POST", False): handler.create,
            ("PUT", True): handler.update,
            ("PATCH", True): handler.patch,
            ("DELETE", True): handler.delete,
            ("DELETE", False): handler.delete_collection,
        }.get((method, name is not None))
        if verb is None:
            raise MethodNotAllowed(
                f"the server does not allow this method on the requested resource ({method} {rt})"
            )
        verb()

    # ---- extra endpoints backed by the controllers

    def _pod_log(self, namespace: str | None, name: str, query: dict) -> None:
        """GET .../pods/{name}/log: container, follow, tailLines, sinceSeconds, timestamps,
        previous, as the API server takes them (text/plain; follow streams until the pod ends)."""
        from kubesim import logs

        store = self.server.api.store

        def number(key):
            value = query.get(key)
            if value in (None, ""):
                return None
            if not str(value).lstrip("-").isdigit():
                raise BadRequest(f"{key}: invalid value {value!r}: must be an integer")
            return int(value)

        tail, since = number("tailLines"), number("sinceSeconds")
        pod = store.get(resources.PODS, namespace, name)
        logs.check_readable(
            pod, container=query.get("container"), previous=_truthy(query.get("previous"))
        )
        stamps = _truthy(query.get("timestamps"))
        lines, after, done = logs.pod_log(
            pod, now=store.clock(), tail=tail, since_seconds=since, timestamps=stamps
        )
        if not _truthy(query.get("follow")):
            text = "".join(line + "\n" for line in lines).encode()
            return self._send(200, text, "text/plain")
        head = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
        head += "Cache-Control: no-cache, private\r\nTransfer-Encoding: chunked\r\n\r\n"
        self.wfile.write(head.encode())
        try:
            if lines:
                self.write_chunk("".join(line + "\n" for line in lines).encode())
            while not done and not self.client_gone():
                time.sleep(0.25)
                try:
                    pod = store.get(resources.PODS, namespace, name)
                except NotFound:
                    break
                lines, after, done = logs.pod_log(
                    pod, now=store.clock(), timestamps=stamps, start_index=after
                )
                if lines:
                    self.write_chunk("".join(line + "\n" for line in lines).encode())
            self.end_chunked()
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _dcgm(self, node: str | None) -> None:
        from kubesim import dcgm

        text = dcgm.render(self.server.api.store, node=node)
        self._send(200, text.encode(), "text/plain; version=0.0.4; charset=utf-8")

    def _gpu_fault(self, query: dict) -> None:
        """The demo's knob: POST /kubesim/gpu-faults?node=N&gpu=I&kind=xid:79 (or kind=repair)."""
        from kubesim.controllers import running

        def one(name: str, default: str = "") -> str:
            value = query.get(name, default)
            return value[0] if isinstance(value, list) else value

        controllers = running(self.server.api.store)
        node, gpu, kind = one("node"), one("gpu", "0"), one("kind", "xid:79")
        if controllers is None or not node or not gpu.isdigit():
            raise BadRequest("node and gpu (an index) are required, and controllers must run")
        try:
            if kind == "repair":
                controllers.gpufaults.repair(node, int(gpu))
                figures = {}
            else:
                figures = controllers.gpufaults.inject(node, int(gpu), kind)
        except ValueError as exc:
            raise BadRequest(str(exc)) from exc
        self._send_json(200, {"node": node, "gpu": int(gpu), "kind": kind, "figures": figures})

    def _visibility(self, method: str, rest: list[str], query: dict) -> None:
        if not rest:
            versions = list(VISIBILITY_VERSIONS)
            return self._send_json(
                200,
                {"kind": "APIGroup", "apiVersion": "v1", **_api_group(VISIBILITY_GROUP, versions)},
            )
        if rest[0] not in VISIBILITY_VERSIONS:
            raise NotFound("the server could not find the requested resource")
        if len(rest) == 1:
            return self._send_json(200, _visibility_resource_list(rest[0]))
        if method != "GET":
            raise MethodNotAllowed(f"{method} is not supported by the visibility API")
        store = self.server.api.store
        path = rest[1:]
        kwargs: dict[str, Any] = {}
        if len(path) == 3 and path[0] == "clusterqueues" and path[2] == "pendingworkloads":
            store.get(resources.CLUSTER_QUEUES, None, path[1], copy=False)
            kwargs["cluster_queue"] = path[1]
        elif (
            len(path) == 5
            and path[0] == "namespaces"
            and path[2] == "localqueues"
            and path[4] == "pendingworkloads"
        ):
            store.get(resources.LOCAL_QUEUES, path[1], path[3], copy=False)
            kwargs.update(namespace=path[1], local_queue=path[3])
        else:
            raise NotFound("the server could not find the requested resource")
        from kubesim import kueue

        summary = kueue.pending_workloads(
            store,
            limit=_int(query.get("limit"), 1000),
            offset=_int(query.get("offset"), 0),
            **kwargs,
        )
        summary["apiVersion"] = f"{VISIBILITY_GROUP}/{rest[0]}"
        self._send_json(200, summary)

    # ---- watch streaming

    def start_chunked(self) -> None:
        head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        head += "Cache-Control: no-cache, private\r\nTransfer-Encoding: chunked\r\n\r\n"
        self.wfile.write(head.encode())

    def write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def end_chunked(self) -> None:
        self.wfile.write(b"0\r\n\r\n")

    def client_gone(self) -> bool:
        """True when the client closed the connection (checked while a watch is idle)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if not readable:
                return False
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True


def _truthy(value: str | None) -> bool:
    return value is not None and value.lower() in ("true", "1", "")


def _int(value: str | None, default: int) -> int:
    if value in (None, ""):
        return default
    try:
        return int(value)
    except ValueError:
        raise BadRequest(f"invalid integer {value!r}") from None


# ------------------------------------------------------------------------------------ operations


class _Operation:
    """One request on a resource path."""

    def __init__(
        self,
        handler: _Handler,
        rt: ResourceType,
        namespace: str | None,
        name: str | None,
        sub: str | None,
        query: dict,
        body: bytes,
    ):
        self.h = handler
        self.api = handler.server.api
        self.store = self.api.store
        self.rt = rt
        self.namespace = namespace if rt.namespaced else None
        self.name = name
        self.sub = sub
        self.query = query
        self.body = body
        self.dry_run = query.get("dryRun") == "All"
        validation = query.get("fieldValidation") or "Warn"
        if validation not in ("Strict", "Warn", "Ignore"):
            raise BadRequest(f"fieldValidation must be Strict, Warn or Ignore, not {validation!r}")
        self.strict = validation == "Strict"
        self.warn = validation == "Warn"

    # ---- helpers

    def _manager(self) -> str:
        manager = self.query.get("fieldManager")
        if manager:
            return manager
        agent = self.h.headers.get("User-Agent") or "unknown"
        return agent.split("/", 1)[0] or "unknown"

    def _decode(self, *, allow_yaml: bool = False) -> Any:
        if not self.body:
            raise BadRequest("the request body is empty")
        try:
            return json.loads(self.body)
        except ValueError:
            if not allow_yaml:
                raise BadRequest("the request body is not valid JSON") from None
        try:
            return yaml.load(self.body, Loader=_YAML_LOADER)
        except yaml.YAMLError:
            raise BadRequest("the request body is neither valid JSON nor valid YAML") from None

    def _decode_object(self, *, allow_yaml: bool = False) -> dict:
        obj = self._decode(allow_yaml=allow_yaml)
        if not isinstance(obj, dict):
            raise BadRequest("the request body must be a JSON object")
        rt = self.rt
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if api_version and api_version != rt.api_version:
            raise BadRequest(
                f"the API version in the data ({api_version}) does not match the "
                f"expected API version ({rt.api_version})"
            )
        if kind and kind != rt.kind:
            raise BadRequest(
                f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})"
            )
        obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
        meta = obj.get("metadata")
        if meta is None:
            meta = obj["metadata"] = {}
        if not isinstance(meta, dict):
            raise BadRequest("metadata must be an object")
        if rt.namespaced:
            if meta.get("namespace") and self.namespace and meta["namespace"] != self.namespace:
                raise BadRequest(
                    "the namespace of the provided object does not match the "
                    "namespace sent on the request"
                )
            if self.namespace:
                meta["namespace"] = self.namespace
        else:
            meta.pop("namespace", None)
        if self.name is not None and meta.get("name") and meta["name"] != self.name:
            raise BadRequest(
                f"the name of the object ({meta['name']}) does not match the name "
                f"on the URL ({self.name})"
            )
        if self.name is not None:
            meta["name"] = self.name
        return obj

    def _admit(self, obj: dict, old: dict | None) -> list[str]:
        return self.api.schemas.admit(self.rt, obj, old, strict=self.strict, subresource=self.sub)

    def _record(self, old: dict | None, new: dict) -> None:
        ssa.record_update(
            old,
            new,
            manager=self._manager(),
            api_version=self.rt.api_version,
            now=now_rfc3339(self.store.clock()),
            keys_for=self.api.schemas.keys_for(self.rt),
            has_status=self.rt.has_status,
            subresource=self.sub,
        )

    def _respond_object(self, code: int, obj: dict, warnings: list[str] | None = None) -> None:
        self.h._send_json(code, obj, warnings if self.warn else None)

    # ---- read verbs

    def get(self) -> None:
        obj = self.store.get(self.rt, self.namespace, self.name, copy=False)
        self._respond_object(200, obj)

    def list(self) -> None:
        q = self.query
        items, rv = self.store.list_with_rv(
            self.rt, self.namespace, q.get("labelSelector"), q.get("fieldSelector"), copy=False
        )
        limit = _int(q.get("limit"), 0)
        token = q.get("continue")
        if token:
            _, after_ns, after_name = decode_continue(token)
            items = [i for i in items if _key(i) > (after_ns, after_name)]
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if limit and len(items) > limit:
            last = items[limit - 1]
            meta["continue"] = encode_continue(rv, *_key(last))
            meta["remainingItemCount"] = len(items) - limit
            items = items[:limit]
        body = {
            "kind": f"{self.rt.kind}List",
            "apiVersion": self.rt.api_version,
            "metadata": meta,
            "items": items,
        }
        self.h._send(200, _dumps(body))

    def watch(self) -> None:
        q = self.query
        labels_ok = parse_label_selector(q.get("labelSelector"))
        fields_ok = parse_field_selector(q.get("fieldSelector"))
        name, namespace, rt = self.name, self.namespace, self.rt

        def matches(obj: dict | None) -> bool:
            if obj is None:
                return False
            meta = obj["metadata"]
            if namespace and meta.get("namespace") != namespace:
                return False
            if name and meta.get("name") != name:
                return False
            if labels_ok and not labels_ok(meta.get("labels") or {}):
                return False
            return not (fields_ok and not fields_ok(obj))

        timeout = _int(q.get("timeoutSeconds"), 0)
        timeout = MAX_WATCH_SECONDS if timeout <= 0 else min(timeout, MAX_WATCH_SECONDS)
        deadline = time.monotonic() + timeout
        bookmarks = _truthy(q.get("allowWatchBookmarks")) and "allowWatchBookmarks" in q
        h = self.h
        try:
            watcher = self.store.watch(rt, q.get("resourceVersion"))
        except Expired as err:
            h.start_chunked()
            h.write_chunk(_dumps({"type": "ERROR", "object": err.status()}) + b"\n")
            h.end_chunked()
            return
        last_sent = time.monotonic()
        try:
            h.start_chunked()
            while not self.api.stopping.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                event = watcher.next(timeout=min(remaining, 0.5))
                if event is None:
                    if h.client_gone():
                        return
                    if bookmarks and time.monotonic() - last_sent >= BOOKMARK_EVERY:
                        self._bookmark(watcher)
                        last_sent = time.monotonic()
                    continue
                etype, obj, old = event
                now_ok, was_ok = matches(obj), matches(old)
                if etype == "MODIFIED" and now_ok != was_ok:
                    etype = "ADDED" if now_ok else "DELETED"
                elif not now_ok:
                    continue
                h.write_chunk(_dumps({"type": etype, "object": from_storage(rt, obj)}) + b"\n")
                last_sent = time.monotonic()
            if bookmarks:
                self._bookmark(watcher)
            h.end_chunked()
        except OSError:
            h.close_connection = True
        finally:
            watcher.close()

    def _bookmark(self, watcher: Any) -> None:
        with self.store.lock:
            rv = self.store.resource_version()
            idle = watcher.queue.empty()
        if idle:
            obj = {
                "kind": self.rt.kind,
                "apiVersion": self.rt.api_version,
                "metadata": {"resourceVersion": str(rv)},
            }
            self.h.write_chunk(_dumps({"type": "BOOKMARK", "object": obj}) + b"\n")

    # ---- write verbs

    def create(self) -> None:
        obj = self._decode_object(allow_yaml=True)
        meta = obj["metadata"]
        for key in (*_SERVER_METADATA, "managedFields"):
            meta.pop(key, None)
        if self.rt.has_status and self.rt is not resources.NODES:
            # (A Node may be created with its status, as a kubelet registering it does.)
            obj.pop("status", None)
        warnings = self._admit(obj, None)
        self._record(None, obj)
        created = self.store.create(self.rt, obj, dry_run=self.dry_run)
        self._respond_object(201, created, warnings)

    def update(self) -> None:
        obj = self._decode_object(allow_yaml=True)
        for key in ("uid", "creationTimestamp", "generation", "selfLink"):
            obj["metadata"].pop(key, None)
        if self.rt.group in CUSTOM_GROUPS and not obj["metadata"].get("resourceVersion"):
            # Custom resources do not allow unconditional updates; built-in kinds do.
            cause = {
                "field": "metadata.resourceVersion",
                "reason": "FieldValueInvalid",
                "message": 'Invalid value: "": must be specified for an update',
            }
            raise invalid(self.rt, self.name or "", [cause])
        with self.store.lock:
            old = self.store.get(self.rt, self.namespace, self.name)
            new = self._prepare(old, obj)
            warnings = self._admit(new, old)
            self._record(old, new)
            result = self.store.update(
                self.rt, new, subresource=self.sub, dry_run=self.dry_run, manager=None
            )
        self._respond_object(200, result, warnings)

    def _prepare(self, old: dict, obj: dict) -> dict:
        """The object a write would store: status or main part from obj, the rest from old."""
        if self.sub == "status":
            new = {k: v for k, v in old.items() if k != "status"}
            new["metadata"] = {**old["metadata"]}
            if "resourceVersion" in obj["metadata"]:
                new["metadata"]["resourceVersion"] = obj["metadata"]["resourceVersion"]
            if "status" in obj:
                new["status"] = obj["status"]
            return new
        new = dict(obj)
        new["metadata"] = dict(obj["metadata"])
        if "managedFields" not in new["metadata"] and "managedFields" in old["metadata"]:
            new["metadata"]["managedFields"] = old["metadata"]["managedFields"]
        if self.rt.has_status:
            new.pop("status", None)
            if "status" in old:
                new["status"] = old["status"]
        return new

    def patch(self) -> None:
        ctype = (self.h.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
        if ctype == APPLY_PATCH:
            return self._apply()
        if ctype not in (MERGE_PATCH, STRATEGIC_PATCH, JSON_PATCH):
            raise UnsupportedMediaType(
                f"the body of the request was in an unknown format - accepted media types "
                f"include: {JSON_PATCH}, {MERGE_PATCH}, {APPLY_PATCH}, {STRATEGIC_PATCH}"
            )
        if ctype == STRATEGIC_PATCH and self.rt.group in CUSTOM_GROUPS:
            raise UnsupportedMediaType(
                f"the body of the request was in an unknown format - accepted media types "
                f"include: {JSON_PATCH}, {MERGE_PATCH}, {APPLY_PATCH}"
            )
        patch = self._decode()
        with self.store.lock:
            old = self.store.get(self.rt, self.namespace, self.name)
            if ctype == JSON_PATCH:
                patched = ssa.json_patch(old, patch)
            elif not isinstance(patch, dict):
                raise BadRequest("a merge patch must be a JSON object")
            elif ctype == STRATEGIC_PATCH:
                patched = ssa.strategic_merge_patch(old, patch)
            else:
                patched = ssa.merge_patch(old, patch)
            if not isinstance(patched, dict):
                raise BadRequest("the patched object is not a JSON object")
            patched.setdefault("metadata", {})
            patched["apiVersion"], patched["kind"] = self.rt.api_version, self.rt.kind
            meta = patched["metadata"]
            for key in ("uid", "creationTimestamp", "generation", "name", "namespace"):
                if key in old["metadata"]:
                    meta[key] = old["metadata"][key]
            if meta.get("resourceVersion") == old["metadata"].get("resourceVersion"):
                meta.pop("resourceVersion", None)
            new = self._prepare(old, patched)
            warnings = self._admit(new, old)
            self._record(old, new)
            result = self.store.update(
                self.rt, new, subresource=self.sub, dry_run=self.dry_run, manager=None
            )
        self._respond_object(200, result, warnings)

    def _apply(self) -> None:
        manager = self.query.get("fieldManager")
        if not manager:
            raise BadRequest("fieldManager is required for apply requests")
        force = _truthy(self.query.get("force")) and "force" in self.query
        config = self._decode_object(allow_yaml=True)
        meta = config["metadata"]
        for key in (*_SERVER_METADATA, "managedFields"):
            meta.pop(key, None)
        if self.rt.namespaced and not self.namespace:
            raise BadRequest("the namespace of the object must be set")
        if self.sub == "status":
            config = {
                k: v for k, v in config.items() if k in ("apiVersion", "kind", "metadata", "status")
            }
        elif self.rt.has_status:
            config.pop("status", None)
        warnings = self.api.schemas.prune(self.rt, config, strict=self.strict)
        keys_for = self.api.schemas.keys_for(self.rt)
        with self.store.lock:
            try:
                live = self.store.get(self.rt, self.namespace, self.name)
            except NotFound:
                if self.sub:
                    raise
                live = None
            new = ssa.apply(
                live,
                config,
                manager=manager,
                force=force,
                api_version=self.rt.api_version,
                now=now_rfc3339(self.store.clock()),
                keys_for=keys_for,
                has_status=self.rt.has_status,
                subresource=self.sub,
            )
            new["apiVersion"], new["kind"] = self.rt.api_version, self.rt.kind
            warnings += self._admit(new, live)
            if live is None:
                result = self.store.create(self.rt, new, dry_run=self.dry_run)
                return self._respond_object(201, result, warnings)
            result = self.store.update(
                self.rt,
                new,
                subresource=self.sub,
                check_rv=False,
                dry_run=self.dry_run,
                manager=None,
            )
        self._respond_object(200, result, warnings)

    def delete(self) -> None:
        options = self._delete_options()
        propagation = options.get("propagationPolicy") or self.query.get("propagationPolicy")
        if options.get("orphanDependents") or self.query.get("orphanDependents") == "true":
            propagation = "Orphan"
        if not propagation:
            # batch/v1 Jobs orphan their pods by default, like a real API server.
            propagation = "Orphan" if self.rt is resources.JOBS else "Background"
        if propagation not in ("Orphan", "Background", "Foreground"):
            raise BadRequest(f"unsupported propagationPolicy {propagation!r}")
        if self.dry_run or options.get("dryRun") == ["All"]:
            obj = self.store.get(self.rt, self.namespace, self.name)
            return self._respond_object(200, _status_success(self.rt, obj))
        obj = self.store.delete(
            self.rt,
            self.namespace,
            self.name,
            propagation=propagation,
            preconditions=options.get("preconditions"),
        )
        if obj["metadata"].get("deletionTimestamp") or self.rt is resources.PODS:
            return self._respond_object(200, obj)
        self._respond_object(200, _status_success(self.rt, obj))

    def _delete_options(self) -> dict:
        if not self.body:
            return {}
        options = self._decode()
        return options if isinstance(options, dict) else {}

    def delete_collection(self) -> None:
        options = self._delete_options()
        propagation = options.get("propagationPolicy") or self.query.get("propagationPolicy")
        items = self.store.list(
            self.rt,
            self.namespace,
            self.query.get("labelSelector"),
            self.query.get("fieldSelector"),
            copy=False,
        )
        if not (self.dry_run or options.get("dryRun") == ["All"]):
            for item in items:
                meta = item["metadata"]
                try:
                    self.store.delete(
                        self.rt,
                        meta.get("namespace"),
                        meta["name"],
                        propagation=propagation or "Background",
                    )
                except NotFound:
                    continue
        body = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {"group": self.rt.group, "kind": self.rt.plural},
        }
        self._respond_object(200, body)


def _key(obj: dict) -> tuple[str, str]:
    meta = obj["metadata"]
    return (meta.get("namespace") or "", meta["name"])


__all__ = ["ApiServer", "not_found"]


# ------------------------------------------------------------------------------- whole cluster


def kubeconfig_text(url: str, *, name: str = "kubesim", namespace: str = "default") -> str:
    """A kubeconfig pointing at url with a dummy bearer token (kubesim does no auth)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": url}}],
        "users": [{"name": name, "user": {"token": "kubesim-dummy-token"}}],
        "contexts": [
            {"name": name, "context": {"cluster": name, "user": name, "namespace": namespace}}
        ],
        "current-context": name,
        "preferences": {},
    }
    return yaml.safe_dump(config, sort_keys=False)


class Cluster:
    """A store, its API server, the controllers (when available) and state persistence."""

    def __init__(
        self,
        *,
        fleet: Any = None,
        crds_dir: Any = None,
        state: Any = None,
        controllers: bool = True,
        time_scale: float = 1.0,
        host: str = "127.0.0.1",
        port: int = 0,
        save_every: float = 2.0,
        watch_history: int = 20000,
    ):
        self.clock = Clock(time_scale)
        self.state = state
        self._fleet = fleet
        self._watch_history = watch_history
        self._with_controllers = controllers
        self.store = self._new_store()
        self.server = ApiServer(self.store, schemas=Schemas(crds_dir), host=host, port=port)
        self.controllers = start_controllers(self.store, clock=self.clock) if controllers else None
        self._save_every = save_every
        self._saver: threading.Thread | None = None
        self._stopped = threading.Event()

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def port(self) -> int:
        return self.server.port

    def _new_store(self) -> Store:
        """The store as the cluster starts: the state file's objects, then the fleet's nodes."""
        store = Store(clock=self.clock.timestamp, history=self._watch_history)
        if self.state:
            store.load(self.state)
            store.ensure_namespaces(("default", "kube-system", "kube-public"))
        if self._fleet is not None:
            from kubesim.fleet import load_fleet

            with store.lock:
                for node in load_fleet(self._fleet):
                    if store.try_get(resources.NODES, None, node["metadata"]["name"]) is None:
                        store.create(resources.NODES, node)
        return store

    def write_kubeconfig(self, path: Any, *, server_url: str | None = None) -> None:
        """Write a kubeconfig for this server; server_url overrides the address clients use."""
        with open(path, "w") as fh:
            fh.write(kubeconfig_text(server_url or self.url))

    def start(self) -> Cluster:
        """Serve in background threads."""
        self.server.start()
        if self.state:
            self._saver = threading.Thread(
                target=self._save_loop, name="kubesim-state", daemon=True
            )
            self._saver.start()
        return self

    def _save_loop(self) -> None:
        while not self._stopped.wait(self._save_every):
            if self.store.dirty:
                try:
                    self.store.save(self.state)
                except OSError:
                    log.exception("could not save state to %s", self.state)

    def reset(self) -> None:
        """Go back to what the cluster was when it started: the fleet's nodes (and what the
        state file holds) only, new controllers, the clock restarted at now, no watch open and
        no fault pending. The server keeps its port, so tests share one (kubesim.testing)."""
        if self.controllers is not None:
            self.controllers.stop()
            self.controllers = None
        self.clock.restart()
        # A new store, so that nothing keyed by the old one (the DCGM exporter's energy
        # counters) carries over; resourceVersions start over as in a new kubesim.
        self.store = self._new_store()
        self.server.reset(self.store)
        if self._with_controllers:
            self.controllers = start_controllers(self.store, clock=self.clock)

    def pause(self) -> None:
        """Stop the controllers until the next reset (a shared kubesim nobody uses)."""
        if self.controllers is not None:
            self.controllers.stop()
            self.controllers = None

    def stop(self) -> None:
        """Stop controllers and the server, and save the state once more."""
        self._stopped.set()
        if self.controllers is not None:
            self.controllers.stop()
        self.server.stop()
        if self._saver is not None:
            self._saver.join(timeout=5)
        if self.state:
            self.store.save(self.state)
