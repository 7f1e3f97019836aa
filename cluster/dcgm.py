"""A DCGM exporter for the GPUs of kwok nodes on the real API server.

kwok runs no device plugin and no DCGM: this process plays both parts for billing. It watches
nodes and pods, gives each pod bound to a GPU node the devices it asked for (the lowest free
ones, kept while the pod lives, as the device plugin would) and serves /metrics in Prometheus
text with kubesim's exporter (kubesim.dcgm.render) over what it watched, so the real cluster
and kubesim expose the same metric names, labels and values for the same fleet.

    python -m cluster.dcgm --kubeconfig var/real-cluster/kubeconfig --port 9400
"""

from __future__ import annotations

import argparse
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from kubesim import resources
from kubesim.dcgm import render
from kubesim.fleet import GPU, accelerator
from kubesim.scheduler import GPU_INDEX_ANNOTATION
from kueuemodel.resources import to_units

logger = logging.getLogger("cluster.dcgm")

SHARED_GPU = "nvidia.com/gpu.shared"
TERMINAL = ("Succeeded", "Failed")


def _pod_devices(pod: dict, resource: str) -> int:
    """How many devices of a resource a pod's containers ask for."""
    total = 0
    for container in (pod.get("spec") or {}).get("containers") or []:
        res = container.get("resources") or {}
        value = (res.get("limits") or {}).get(resource) or (res.get("requests") or {}).get(resource)
        if value is not None:
            total += to_units(resource, value)
    return total


def _as_device_plugin_sees(node: dict) -> tuple[dict, str]:
    """The node as kubesim's exporter reads it, and the resource name its pods ask for: a
    time-sliced node renamed by the device plugin advertises nvidia.com/gpu.shared, which is
    nvidia.com/gpu to the GPUs."""
    status = node.get("status") or {}
    capacity = status.get("capacity") or {}
    if SHARED_GPU in capacity and GPU not in capacity:
        view = {**node, "status": {**status, "capacity": {**capacity, GPU: capacity[SHARED_GPU]}}}
        return view, SHARED_GPU
    resource, _ = accelerator(node)
    return node, resource


class FleetView:
    """Nodes and pods as watched, with the devices each pod holds; read by kubesim's exporter
    through list() and get(), the two calls it makes on a store."""

    def __init__(self):
        self.lock = threading.Lock()
        self.nodes: dict[str, dict] = {}
        self.pods: dict[str, dict] = {}  # uid -> pod
        self.devices: dict[str, tuple[str, list[int]]] = {}  # pod uid -> (node, indices)

    # -- what the watches feed in --------------------------------------------------------

    def set_node(self, node: dict, deleted: bool = False) -> None:
        with self.lock:
            name = node["metadata"]["name"]
            if deleted:
                self.nodes.pop(name, None)
            else:
                self.nodes[name] = node

    def set_pod(self, pod: dict, deleted: bool = False) -> None:
        with self.lock:
            uid = pod["metadata"]["uid"]
            node = (pod.get("spec") or {}).get("nodeName")
            phase = (pod.get("status") or {}).get("phase")
            if deleted or not node or phase in TERMINAL:
                self.pods.pop(uid, None)
                self.devices.pop(uid, None)
                return
            self.pods[uid] = pod
            if uid not in self.devices:
                self._allocate(uid, pod, node)

    def replace(self, kind: str, items: list[dict]) -> None:
        """A fresh list after a watch broke: what is gone is dropped, the rest kept."""
        if kind == "nodes":
            with self.lock:
                self.nodes = {n["metadata"]["name"]: n for n in items}
            return
        seen = {p["metadata"]["uid"] for p in items}
        with self.lock:
            for uid in list(self.pods):
                if uid not in seen:
                    self.pods.pop(uid, None)
                    self.devices.pop(uid, None)
        for pod in items:
            self.set_pod(pod)

    def _allocate(self, uid: str, pod: dict, node_name: str) -> None:
        node = self.nodes.get(node_name)
        if node is None:
            return  # its node is not known yet; the next event of the pod allocates
        _, resource = _as_device_plugin_sees(node)
        wanted = _pod_devices(pod, resource)
        if not wanted:
            return
        capacity = (node.get("status") or {}).get("capacity") or {}
        slots = to_units(resource, capacity.get(resource, 0))
        taken = {i for n, indices in self.devices.values() if n == node_name for i in indices}
        free = [i for i in range(slots) if i not in taken]
        self.devices[uid] = (node_name, free[:wanted])

    # -- what kubesim's exporter reads -------------------------------------------------

    def list(self, rt, copy: bool = True) -> list[dict]:
        with self.lock:
            if rt is resources.NODES:
                return [_as_device_plugin_sees(n)[0] for n in self.nodes.values()]
            if rt is resources.PODS:
                return [self._pod_view(uid, pod) for uid, pod in self.pods.items()]
        return []

    def get(self, rt, namespace, name, copy: bool = True) -> dict:
        with self.lock:
            if rt is resources.NODES and name in self.nodes:
                return _as_device_plugin_sees(self.nodes[name])[0]
        raise KeyError(name)

    def _pod_view(self, uid: str, pod: dict) -> dict:
        _, indices = self.devices.get(uid, ("", []))
        meta = dict(pod["metadata"])
        meta["annotations"] = {
            **(meta.get("annotations") or {}),
            GPU_INDEX_ANNOTATION: ",".join(str(i) for i in indices),
        }
        return {**pod, "metadata": meta}


def _watch(view: FleetView, kind: str, stop: threading.Event) -> None:
    """List then watch nodes or pods, listing again whenever the watch breaks."""
    core = client.CoreV1Api()
    serialize = client.ApiClient().sanitize_for_serialization
    lister = core.list_node if kind == "nodes" else core.list_pod_for_all_namespaces
    while not stop.is_set():
        try:
            listing = lister(_request_timeout=30)
            view.replace(kind, [serialize(item) for item in listing.items])
            stream = watch.Watch().stream(
                lister,
                resource_version=listing.metadata.resource_version,
                timeout_seconds=300,
                _request_timeout=330,
            )
            for event in stream:
                obj = serialize(event["object"])
                deleted = event["type"] == "DELETED"
                if kind == "nodes":
                    view.set_node(obj, deleted)
                else:
                    view.set_pod(obj, deleted)
                if stop.is_set():
                    break
        except ApiException as exc:
            if exc.status != 410:  # 410 Gone: the watch is too old, list again
                logger.warning("watching %s: %s", kind, exc)
                time.sleep(1)
        except Exception as exc:  # the connection broke: list again after a pause
            logger.warning("watching %s: %s", kind, exc)
            time.sleep(1)


def serve(view: FleetView, host: str, port: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path.split("?")[0] == "/metrics":
                body = render(view).encode()
                content_type = "text/plain; version=0.0.4; charset=utf-8"
            elif self.path == "/healthz":
                body, content_type = b"ok", "text/plain"
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    return ThreadingHTTPServer((host, port), Handler)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9400)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    config.load_kube_config(config_file=args.kubeconfig)
    view = FleetView()
    stop = threading.Event()
    # Nodes first, so that the pods' devices are allocated as they are listed.
    nodes = threading.Thread(target=_watch, args=(view, "nodes", stop), daemon=True)
    nodes.start()
    deadline = time.monotonic() + 30
    while not view.nodes and time.monotonic() < deadline:
        time.sleep(0.1)
    threading.Thread(target=_watch, args=(view, "pods", stop), daemon=True).start()
    server = serve(view, args.host, args.port)
    logger.info("serving DCGM metrics on http://%s:%d/metrics", args.host, args.port)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
