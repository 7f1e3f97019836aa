"""Start, stop and inspect the real control plane on loopback.

`up` builds what is missing, makes the certificates, starts etcd and the API server, installs
the add-ons' CRDs and webhooks from the modules they were built from, starts the controller
manager, the scheduler, Kueue, JobSet, the training operator and kwok, creates kwok nodes from a
fleet file with our kwok stages, starts the DCGM exporter, and waits until each answers, saying
which one does not (with its log's last lines). `down` stops them all.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import requests

from cluster import addons, build, components, credentials, nodes, probes
from cluster.api import Api, ApiError
from cluster.components import Component, Context, Ports, Probe
from cluster.processes import Layout, Process, log_tail, start_process, state_dir, stop_processes

__all__ = ["Cluster", "Layout", "NotReady", "Options", "state_dir"]

DEFAULT_FLEET = Path(__file__).resolve().parent / "fleet.yaml"


class NotReady(RuntimeError):
    """A component that did not become ready (or stopped), with its log's last lines."""

    def __init__(self, component: str, reason: str, log_tail_text: str = ""):
        message = f"{component} is not ready: {reason}"
        if log_tail_text:
            message += f"\n--- last lines of its log ---\n{log_tail_text}"
        super().__init__(message)
        self.component = component


@dataclass
class Options:
    """What `up` is asked for."""

    fleet: Path = DEFAULT_FLEET
    pod_duration: str = "10s"
    api_port: int | None = None
    dcgm_port: int | None = None
    timeout: float = 180.0
    log_level: int = 2


@dataclass
class Cluster:
    """One local control plane, kept in a state directory."""

    layout: Layout
    log: Callable[[str], None] = print
    processes: dict[str, Process] = field(default_factory=dict)

    # -- inspection ------------------------------------------------------------------------

    def info(self) -> dict:
        """What `up` recorded: server, kubeconfig, ports, versions, the exporter's URL."""
        try:
            return json.loads(self.layout.info.read_text())
        except (OSError, ValueError):
            return {}

    def status(self) -> dict[str, bool]:
        """component -> whether its process runs."""
        return {p.name: p.alive() for p in Process.load_all(self.layout)}

    def is_up(self) -> bool:
        status = self.status()
        expected = set(self.info().get("components", []))
        return bool(status) and all(status.values()) and set(status) == expected

    def admin_api(self) -> Api:
        pki_dir = self.layout.pki
        return Api(
            self.info()["server"],
            ca=pki_dir / "ca.crt",
            cert=pki_dir / "client-admin.crt",
            key=pki_dir / "client-admin.key",
        )

    # -- up and down -----------------------------------------------------------------------

    def up(self, options: Options) -> float:
        """Start everything; returns the seconds the start took (the build not counted)."""
        if self.is_up():
            self.log(f"the real cluster is already up ({self.layout.kubeconfig})")
            return 0.0
        if Process.load_all(self.layout):
            self.log("stopping what is left of an earlier start")
            stop_processes(self.layout, log=self.log)
        binaries = build.build(log=self.log)
        started = time.monotonic()
        try:
            self._up(options, binaries)
        except BaseException:
            self.log("stopping the components after the failed start")
            stop_processes(self.layout, log=self.log)
            raise
        seconds = time.monotonic() - started
        self.log(f"the real cluster is up in {seconds:.1f} s")
        return seconds

    def down(self) -> None:
        stop_processes(self.layout, log=self.log)

    def _up(self, options: Options, binaries: dict[str, Path]) -> None:
        layout = self.layout
        layout.root.mkdir(parents=True, exist_ok=True)
        ports = Ports.allocate(apiserver=options.api_port, dcgm=options.dcgm_port)
        ctx = self._context(options, binaries, ports)
        self._record(options, ports)
        for make in components.CONTROL_PLANE:
            self._start_and_wait(make(ctx), options.timeout)
        api = self.admin_api()
        self._install(api, ctx, options.timeout)
        started = [self._start(make(ctx)) for make in components.CONTROLLERS]
        for component in started:
            self._wait(component.name, component.probe, options.timeout)
        self._create_nodes(api, options)
        for name, probe in probes.webhooks(api):
            self._wait(name, probe, options.timeout)
        self._wait("kueue visibility API", probes.visibility(api), options.timeout)
        for make in components.EXPORTERS:
            self._start_and_wait(make(ctx), options.timeout)

    def _context(self, options: Options, binaries, ports: Ports) -> Context:
        layout = self.layout
        certs = credentials.make_certificates(layout.pki)
        server = f"https://127.0.0.1:{ports.apiserver}"
        kubeconfigs = {
            name: credentials.write_kubeconfig(
                layout.kubeconfig_of(name),
                server=server,
                ca=certs.ca.cert,
                pair=certs.clients[name],
                user=identity,
            )
            for name, (identity, _) in credentials.CLIENTS.items()
        }
        shutil.copyfile(kubeconfigs["admin"], layout.kubeconfig)
        layout.kubeconfig.chmod(0o600)
        return Context(layout, binaries, ports, certs, kubeconfigs, options.log_level)

    def _record(self, options: Options, ports: Ports) -> None:
        self.layout.info.write_text(
            json.dumps(
                {
                    "server": f"https://127.0.0.1:{ports.apiserver}",
                    "kubeconfig": str(self.layout.kubeconfig),
                    "ports": ports.__dict__,
                    "components": components.NAMES,
                    "versions": build.versions(),
                    "dcgm_url": f"http://127.0.0.1:{ports.dcgm}/metrics",
                    "fleet": str(options.fleet),
                },
                indent=1,
            )
        )

    # -- steps -----------------------------------------------------------------------------

    def _start(self, component: Component) -> Component:
        cwd = self.layout.component_dir(component.name)
        process = start_process(
            self.layout, component.name, component.argv, cwd=cwd, env=component.env
        )
        self.processes[component.name] = process
        return component

    def _start_and_wait(self, component: Component, timeout: float) -> None:
        self._start(component)
        self._wait(component.name, component.probe, timeout)

    def _wait(self, name: str, probe: Probe, timeout: float) -> None:
        """Poll probe until it says ready; fail at once if the component's process exits."""
        began = time.monotonic()
        reason = "no answer yet"
        while time.monotonic() - began < timeout:
            process = self.processes.get(name)
            if process is not None and not process.alive():
                raise NotReady(name, "its process exited", log_tail(process.log))
            try:
                ok, reason = probe()
            except (requests.RequestException, ApiError, OSError, KeyError) as exc:
                ok, reason = False, f"{type(exc).__name__}: {exc}"
            if ok:
                self.log(f"  {name:<26} ready ({time.monotonic() - began:.1f} s)")
                return
            time.sleep(0.25)
        process = self.processes.get(name)
        tail = log_tail(process.log) if process else ""
        raise NotReady(name, f"not ready after {timeout:.0f} s ({reason})", tail)

    def _install(self, api: Api, ctx: Context, timeout: float) -> None:
        """Namespaces, the add-ons' CRDs (established before anything uses them), their webhook
        configurations and Kueue's visibility API and certificate."""
        parts = addons.install_set(ctx)
        for namespace in addons.NAMESPACES:
            api.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        crds = [crd for part in parts for crd in part.crds]
        for crd in crds:
            api.apply(crd)
        names = [crd["metadata"]["name"] for crd in crds]
        self._wait("CRDs", probes.crds_established(api, names), timeout)
        hooks = [obj for part in parts for obj in part.webhook_configurations]
        for obj in [*hooks, *(obj for part in parts for obj in part.extra)]:
            api.apply(obj)
        api.apply(credentials.kueue_certificate_secret(ctx.certs))
        self.log(f"  installed {len(crds)} CRDs and {len(hooks)} webhook configurations")

    def _create_nodes(self, api: Api, options: Options) -> None:
        for stage in nodes.stages(options.pod_duration):
            api.apply(stage)
        created = nodes.fleet_nodes(nodes.read_fleet(options.fleet))
        for node in created:
            try:
                api.create(node)
            except ApiError as exc:
                if exc.status != 409:
                    raise
        names = {n["metadata"]["name"] for n in created}
        self._wait("kwok nodes", probes.nodes_ready(api, names), options.timeout)
        self.log(f"  {len(names)} kwok nodes from {options.fleet}")
