"""Start, stop and inspect the real control plane on loopback.

`up` builds what is missing, makes the certificates, starts etcd, the API server, the controller
manager, the scheduler, Kueue, JobSet, the training operator, kwok and the DCGM exporter as
processes of their own (each with a log under <state>/logs), installs the add-ons' CRDs and
webhooks from the modules they were built from, creates kwok nodes from a fleet file and waits
until each component answers, saying which one does not. `down` stops them all.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import requests
import urllib3
import yaml

from cluster import addons, build, nodes, pki
from cluster.api import Api, ApiError

REPO = Path(__file__).resolve().parents[1]
DEFAULT_FLEET = Path(__file__).resolve().parent / "fleet.yaml"
KUEUE_NAMESPACE = "kueue-system"
TRAINING_KINDS = ("PyTorchJob",)
SERVICE_RANGE = "10.96.0.0/16"
ADMISSION_PLUGINS = (
    "NamespaceLifecycle,LimitRanger,ServiceAccount,ResourceQuota,DefaultTolerationSeconds,"
    "Priority,NodeRestriction,MutatingAdmissionWebhook,ValidatingAdmissionWebhook,"
    "ValidatingAdmissionPolicy"
)
# Kueue as the portal expects it (scripts/serve starts kubesim's the same way): fair sharing on,
# and admission fair sharing with the portal's half-life, counting GPUs only.
KUEUE_FRAMEWORKS = ("batch/job", "kubeflow.org/pytorchjob", "jobset.x-k8s.io/jobset")


class NotReady(RuntimeError):
    """A component that did not become ready (or stopped), with its log's last lines."""

    def __init__(self, component: str, reason: str, log_tail: str = ""):
        message = f"{component} is not ready: {reason}"
        if log_tail:
            message += f"\n--- last lines of its log ---\n{log_tail}"
        super().__init__(message)
        self.component = component


def state_dir(explicit: str | None = None) -> Path:
    """Where a cluster keeps its state: --state, REAL_CLUSTER_DIR, else var/real-cluster."""
    value = explicit or os.environ.get("REAL_CLUSTER_DIR")
    return Path(value).resolve() if value else REPO / "var" / "real-cluster"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _proc_start_ticks(pid: int) -> int | None:
    """A process's start time (clock ticks since boot), so that a reused pid is not taken for
    one of ours."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces; the fields after it are plain numbers.
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X"):  # exited, not yet reaped
        return None
    return int(fields[19])


def _tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


@dataclass
class Layout:
    """The files of one cluster under its state directory."""

    root: Path

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def info(self) -> Path:
        return self.root / "cluster.json"

    def component_dir(self, name: str) -> Path:
        path = self.root / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def kubeconfig_of(self, name: str) -> Path:
        return self.root / "kubeconfigs" / f"{name}.kubeconfig"


@dataclass
class Process:
    """A started component: its pid (and start time), command and log."""

    name: str
    pid: int
    ticks: int | None
    log: str
    argv: list[str]
    started: float = 0.0

    def alive(self) -> bool:
        return self.ticks is not None and _proc_start_ticks(self.pid) == self.ticks

    def save(self, layout: Layout) -> None:
        layout.run.mkdir(parents=True, exist_ok=True)
        (layout.run / f"{self.name}.json").write_text(json.dumps(self.__dict__, indent=1))

    @classmethod
    def load_all(cls, layout: Layout) -> list[Process]:
        out = []
        for path in sorted(layout.run.glob("*.json")) if layout.run.exists() else []:
            try:
                out.append(cls(**json.loads(path.read_text())))
            except (ValueError, TypeError):
                continue
        return out


def start_process(
    layout: Layout, name: str, argv: list[str], *, cwd: Path, env: dict | None = None
) -> Process:
    """Start a component in a session of its own, detached from the caller, logging to a file."""
    layout.logs.mkdir(parents=True, exist_ok=True)
    log_path = layout.logs / f"{name}.log"
    with open(log_path, "ab") as log:
        log.write(f"\n=== {time.strftime('%Y-%m-%dT%H:%M:%S')} {' '.join(argv)}\n".encode())
        log.flush()
        child = subprocess.Popen(
            argv,
            cwd=cwd,
            env={**os.environ, **(env or {})},
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    process = Process(
        name, child.pid, _proc_start_ticks(child.pid), str(log_path), argv, time.time()
    )
    process.save(layout)
    return process


def stop_processes(layout: Layout, *, timeout: float = 15.0, log=print) -> None:
    """Stop every component this state directory started, last started first, each before the
    next (the API server before etcd, which it needs to stop cleanly)."""
    processes = sorted(Process.load_all(layout), key=lambda p: p.started)
    for process in reversed(processes):
        if not process.alive():
            continue
        _signal(process, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while process.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        if process.alive():
            log(f"{process.name} (pid {process.pid}) did not stop in {timeout:.0f} s: killed")
            _signal(process, signal.SIGKILL)
            while process.alive():
                time.sleep(0.05)
    if layout.run.exists():
        shutil.rmtree(layout.run)


def _signal(process: Process, signum: int) -> None:
    """Signal a component's process group (it runs in a session of its own)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signum)


def write_kubeconfig(path: Path, *, server: str, ca: Path, pair: pki.Pair, user: str) -> Path:
    import base64

    def data(p: Path) -> str:
        return base64.b64encode(p.read_bytes()).decode()

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "real-cluster",
                "cluster": {"server": server, "certificate-authority-data": data(ca)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": data(pair.cert),
                    "client-key-data": data(pair.key),
                },
            }
        ],
        "contexts": [
            {"name": "real-cluster", "context": {"cluster": "real-cluster", "user": user}}
        ],
        "current-context": "real-cluster",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path


@dataclass
class Certificates:
    ca: pki.Pair
    front_proxy_ca: pki.Pair
    apiserver: pki.Pair
    front_proxy_client: pki.Pair
    kubelet_client: pki.Pair
    service_accounts: pki.Pair
    clients: dict[str, pki.Pair]
    serving: dict[str, pki.Pair]
    kueue_ca: pki.Pair


# Client identities: the controller manager and scheduler as kubeadm names them (their
# bootstrap RBAC roles apply); the add-ons and the tools as cluster administrators.
CLIENTS = {
    "admin": ("kubernetes-admin", "system:masters"),
    "kube-controller-manager": ("system:kube-controller-manager", None),
    "kube-scheduler": ("system:kube-scheduler", None),
    "kueue": ("real-cluster:kueue", "system:masters"),
    "jobset": ("real-cluster:jobset", "system:masters"),
    "training-operator": ("real-cluster:training-operator", "system:masters"),
    "kwok": ("real-cluster:kwok", "system:masters"),
    "dcgm-exporter": ("real-cluster:dcgm-exporter", "system:masters"),
}
# Serving certificates of the webhook servers: loopback plus the names upstream's Services
# would give them.
SERVING = {
    "jobset-webhook": ("jobset-webhook-service.jobset-system.svc",),
    "training-operator-webhook": ("training-operator.kubeflow.svc",),
}
KUEUE_SERVING = {
    "kueue-webhook": ("kueue-webhook-service.kueue-system.svc",),
    "kueue-visibility": ("visibility-server.kueue-system.svc",),
}


def make_certificates(layout: Layout) -> Certificates:
    directory = layout.pki
    directory.mkdir(parents=True, exist_ok=True)
    ca = pki.ensure_ca(directory, "ca", "real-cluster-ca")
    front = pki.ensure_ca(directory, "front-proxy-ca", "real-cluster-front-proxy-ca")
    apiserver = pki.ensure_cert(
        directory, "apiserver", ca, common_name="kube-apiserver", server_names=pki.API_SERVER_NAMES
    )
    front_client = pki.ensure_cert(
        directory, "front-proxy-client", front, common_name="front-proxy-client", client=True
    )
    kubelet_client = pki.ensure_cert(
        directory,
        "apiserver-kubelet-client",
        ca,
        common_name="kube-apiserver-kubelet-client",
        organization="system:masters",
        client=True,
    )
    clients = {
        name: pki.ensure_cert(
            directory, f"client-{name}", ca, common_name=cn, organization=org, client=True
        )
        for name, (cn, org) in CLIENTS.items()
    }
    serving = {
        name: pki.ensure_cert(
            directory,
            f"serving-{name}",
            ca,
            common_name=names[0],
            server_names=(*pki.LOOPBACK_NAMES, *names),
        )
        for name, names in SERVING.items()
    }
    # Kueue's own CA (see _start_kueue): its certificate rotator checks it by the name "kueue-ca".
    kueue_ca = pki.ensure_ca(directory, "kueue-ca", "kueue-ca", dns_name="kueue-ca", use_rsa=True)
    for name, names in KUEUE_SERVING.items():
        serving[name] = pki.ensure_cert(
            directory,
            f"serving-{name}",
            kueue_ca,
            common_name=names[0],
            server_names=(*pki.LOOPBACK_NAMES, *names),
        )
    sa = pki.ensure_signing_key(directory, "service-accounts")
    return Certificates(
        ca, front, apiserver, front_client, kubelet_client, sa, clients, serving, kueue_ca
    )


@dataclass
class Ports:
    etcd: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int
    kueue_webhook: int
    kueue_probe: int
    kueue_visibility: int
    jobset_webhook: int
    jobset_probe: int
    training_webhook: int
    training_probe: int
    kwok: int
    dcgm: int

    @classmethod
    def allocate(cls, api_port: int | None = None, dcgm_port: int | None = None) -> Ports:
        names = list(cls.__dataclass_fields__)
        chosen = {name: free_port() for name in names}
        if api_port:
            chosen["apiserver"] = api_port
        if dcgm_port:
            chosen["dcgm"] = dcgm_port
        return cls(**chosen)


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
    # component -> a probe answering (ready, why not), set as each component starts
    checks: dict[str, Callable[[], tuple[bool, str]]] = field(default_factory=dict)

    # -- inspection --------------------------------------------------------------------------

    def info(self) -> dict:
        try:
            return json.loads(self.layout.info.read_text())
        except (OSError, ValueError):
            return {}

    def status(self) -> dict[str, bool]:
        """component -> whether its process runs."""
        return {p.name: p.alive() for p in Process.load_all(self.layout)}

    def is_up(self) -> bool:
        status = self.status()
        info = self.info()
        return (
            bool(status) and all(status.values()) and set(status) == set(info.get("components", []))
        )

    def admin_api(self) -> Api:
        info = self.info()
        return Api(
            info["server"],
            ca=self.layout.pki / "ca.crt",
            cert=self.layout.pki / "client-admin.crt",
            key=self.layout.pki / "client-admin.key",
        )

    # -- up ----------------------------------------------------------------------------------

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
            self._up(options, binaries, started)
        except BaseException:
            self.log("stopping the components after the failed start")
            stop_processes(self.layout, log=self.log)
            raise
        return time.monotonic() - started

    def _up(self, options: Options, binaries: dict[str, Path], started: float) -> None:
        layout = self.layout
        layout.root.mkdir(parents=True, exist_ok=True)
        certs = make_certificates(layout)
        ports = Ports.allocate(options.api_port, options.dcgm_port)
        server = f"https://127.0.0.1:{ports.apiserver}"
        kubeconfigs = {
            name: write_kubeconfig(
                layout.kubeconfig_of(name),
                server=server,
                ca=certs.ca.cert,
                pair=certs.clients[name],
                user=CLIENTS[name][0],
            )
            for name in CLIENTS
        }
        shutil.copyfile(kubeconfigs["admin"], layout.kubeconfig)
        layout.kubeconfig.chmod(0o600)
        components = [
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "kueue",
            "jobset",
            "training-operator",
            "kwok",
            "dcgm-exporter",
        ]
        layout.info.write_text(
            json.dumps(
                {
                    "server": server,
                    "kubeconfig": str(layout.kubeconfig),
                    "ports": ports.__dict__,
                    "components": components,
                    "versions": build.versions(),
                    "dcgm_url": f"http://127.0.0.1:{ports.dcgm}/metrics",
                    "fleet": str(options.fleet),
                },
                indent=1,
            )
        )
        self._step("etcd", lambda: self._start_etcd(binaries, ports), options)
        self._step("kube-apiserver", lambda: self._start_apiserver(binaries, ports, certs), options)
        api = self.admin_api()
        sources = {
            "kueue": build.module_source("sigs.k8s.io/kueue"),
            "jobset": build.module_source("sigs.k8s.io/jobset"),
            "kwok": build.module_source("sigs.k8s.io/kwok"),
            "training-operator": build.module_source(
                "github.com/kubeflow/training-operator", "training-operator"
            ),
        }
        self._install(api, sources, certs, ports, options)
        self._start_controllers(binaries, ports, certs, kubeconfigs, options)
        for name in ("kube-controller-manager", "kube-scheduler", "kueue", "jobset"):
            self._wait_component(name, options)
        for name in ("training-operator", "kwok"):
            self._wait_component(name, options)
        self._create_nodes(api, options)
        self._wait_webhooks(api, options)
        self._start_exporter(ports, kubeconfigs["dcgm-exporter"])
        self._wait_component("dcgm-exporter", options)
        self.log(f"the real cluster is up in {time.monotonic() - started:.1f} s")

    # -- steps -------------------------------------------------------------------------------

    def _step(self, name: str, start: Callable[[], None], options: Options) -> None:
        start()
        self._wait_component(name, options)

    def _wait_component(self, name: str, options: Options) -> None:
        self._wait(name, self.checks[name], options.timeout)

    def _wait(self, name: str, check: Callable[[], tuple[bool, str]], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        began = time.monotonic()
        reason = "no answer yet"
        while time.monotonic() < deadline:
            process = self.processes.get(name)
            if process is not None and not process.alive():
                raise NotReady(name, "its process exited", _tail(Path(process.log)))
            try:
                ok, reason = check()
            except (requests.RequestException, ApiError, OSError, KeyError) as exc:
                ok, reason = False, f"{type(exc).__name__}: {exc}"
            if ok:
                self.log(f"  {name:<24} ready ({time.monotonic() - began:.1f} s)")
                return
            time.sleep(0.25)
        process = self.processes.get(name)
        tail = _tail(Path(process.log)) if process else ""
        raise NotReady(name, f"not ready after {timeout:.0f} s ({reason})", tail)

    def _start(self, name: str, argv: list[str], env: dict | None = None) -> Process:
        cwd = self.layout.component_dir(name)
        process = start_process(self.layout, name, argv, cwd=cwd, env=env)
        self.processes[name] = process
        return process

    def _start_etcd(self, binaries, ports: Ports) -> None:
        data = self.layout.component_dir("etcd") / "data"
        # A fresh cluster on every start: nothing of a previous run's objects is left.
        shutil.rmtree(data, ignore_errors=True)
        peer = f"http://127.0.0.1:{ports.etcd_peer}"
        client = f"http://127.0.0.1:{ports.etcd}"
        self._start(
            "etcd",
            [
                str(binaries["etcd"]),
                "--name=real-cluster",
                f"--data-dir={data}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=real-cluster={peer}",
                "--initial-cluster-state=new",
                # A throw-away test cluster: no fsync (the disk is shared by many processes).
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        self.checks["etcd"] = lambda: self._http_ok(f"{client}/health", '"health":"true"')

    def _start_apiserver(self, binaries, ports: Ports, certs: Certificates) -> None:
        p = self.layout.pki
        self._start(
            "kube-apiserver",
            [
                str(binaries["kube-apiserver"]),
                f"--etcd-servers=http://127.0.0.1:{ports.etcd}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={ports.apiserver}",
                f"--tls-cert-file={certs.apiserver.cert}",
                f"--tls-private-key-file={certs.apiserver.key}",
                f"--client-ca-file={certs.ca.cert}",
                f"--service-account-key-file={certs.service_accounts.cert}",
                f"--service-account-signing-key-file={certs.service_accounts.key}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-cluster-ip-range={SERVICE_RANGE}",
                "--authorization-mode=Node,RBAC",
                f"--enable-admission-plugins={ADMISSION_PLUGINS}",
                # The aggregation layer (Kueue's visibility API) and the kubelet API (kwok).
                f"--requestheader-client-ca-file={certs.front_proxy_ca.cert}",
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={certs.front_proxy_client.cert}",
                f"--proxy-client-key-file={certs.front_proxy_client.key}",
                f"--kubelet-client-certificate={certs.kubelet_client.cert}",
                f"--kubelet-client-key={certs.kubelet_client.key}",
                "--allow-privileged=true",
                "--profiling=false",
                # The `kubernetes` Service cannot point at a loopback address; nothing in this
                # cluster reaches the API server through it.
                "--endpoint-reconciler-type=none",
                f"--cert-dir={p}",
            ],
        )
        self.checks["kube-apiserver"] = lambda: self._api_ok("/readyz")

    def _install(self, api: Api, sources, certs: Certificates, ports: Ports, options) -> None:
        bundle = addons.ca_bundle(certs.ca.cert)
        parts = {
            "kueue": addons.kueue(
                sources["kueue"],
                port=ports.kueue_webhook,
                visibility_port=ports.kueue_visibility,
                bundle=addons.ca_bundle(certs.kueue_ca.cert),
                namespace=KUEUE_NAMESPACE,
            ),
            "jobset": addons.jobset(sources["jobset"], port=ports.jobset_webhook, bundle=bundle),
            "training-operator": addons.training_operator(
                sources["training-operator"],
                port=ports.training_webhook,
                bundle=bundle,
                kinds=TRAINING_KINDS,
            ),
            "kwok": addons.kwok(sources["kwok"]),
        }
        for namespace in (KUEUE_NAMESPACE, "jobset-system", "kubeflow"):
            api.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        crds = [crd for part in parts.values() for crd in part.crds]
        for crd in crds:
            api.apply(crd)
        names = [crd["metadata"]["name"] for crd in crds]
        self._wait("CRDs", lambda: self._crds_established(api, names), options.timeout)
        for part in parts.values():
            for obj in [*part.webhook_configurations, *part.extra]:
                api.apply(obj)
        api.apply(self._kueue_certificate_secret(certs))
        self.log(
            f"  installed {len(crds)} CRDs and "
            f"{sum(len(p.webhook_configurations) for p in parts.values())} webhook configurations"
        )

    def _crds_established(self, api: Api, names: list[str]) -> tuple[bool, str]:
        for name in names:
            crd = api.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
            conditions = {
                c["type"]: c["status"] for c in (crd.get("status") or {}).get("conditions", [])
            }
            if conditions.get("Established") != "True":
                return False, f"{name} not established"
        return True, ""

    def _start_controllers(self, binaries, ports, certs, kubeconfigs, options: Options) -> None:
        layout = self.layout
        level = str(options.log_level)
        kcm = str(kubeconfigs["kube-controller-manager"])
        self._start(
            "kube-controller-manager",
            [
                str(binaries["kube-controller-manager"]),
                f"--kubeconfig={kcm}",
                f"--authentication-kubeconfig={kcm}",
                f"--authorization-kubeconfig={kcm}",
                "--bind-address=127.0.0.1",
                f"--secure-port={ports.controller_manager}",
                f"--cert-dir={layout.component_dir('kube-controller-manager')}",
                f"--client-ca-file={certs.ca.cert}",
                f"--root-ca-file={certs.ca.cert}",
                f"--service-account-private-key-file={certs.service_accounts.key}",
                "--use-service-account-credentials=true",
                f"--cluster-signing-cert-file={certs.ca.cert}",
                f"--cluster-signing-key-file={certs.ca.key}",
                f"--service-cluster-ip-range={SERVICE_RANGE}",
                "--controllers=*",
                "--leader-elect=false",
                f"--v={min(int(level), 2)}",
            ],
        )
        sched = str(kubeconfigs["kube-scheduler"])
        self._start(
            "kube-scheduler",
            [
                str(binaries["kube-scheduler"]),
                f"--kubeconfig={sched}",
                f"--authentication-kubeconfig={sched}",
                f"--authorization-kubeconfig={sched}",
                "--bind-address=127.0.0.1",
                f"--secure-port={ports.scheduler}",
                f"--cert-dir={layout.component_dir('kube-scheduler')}",
                "--leader-elect=false",
                f"--v={min(int(level), 2)}",
            ],
        )
        self._start_kueue(binaries, ports, certs, kubeconfigs, level)
        self._start_jobset(binaries, ports, certs, kubeconfigs, level)
        operator_certs = pki.install_serving_dir(
            certs.serving["training-operator-webhook"],
            layout.component_dir("training-operator") / "certs",
        )
        self._start(
            "training-operator",
            [
                str(binaries["training-operator"]),
                *[f"--enable-scheme={kind.lower()}" for kind in TRAINING_KINDS],
                "--webhook-host=127.0.0.1",
                f"--webhook-port={ports.training_webhook}",
                f"--webhook-cert-dir={operator_certs}",
                f"--health-probe-bind-address=127.0.0.1:{ports.training_probe}",
                "--metrics-bind-address=0",
                f"--zap-log-level={level}",
            ],
            env={"KUBECONFIG": str(kubeconfigs["training-operator"])},
        )
        kwok_dir = layout.component_dir("kwok")
        self._start(
            "kwok",
            [
                str(binaries["kwok"]),
                f"--kubeconfig={kubeconfigs['kwok']}",
                f"--manage-nodes-with-annotation-selector={nodes.KWOK_ANNOTATION}=fake",
                "--enable-crds=Stage",
                f"--server-address=127.0.0.1:{ports.kwok}",
                "--node-ip=127.0.0.1",
                f"--node-port={ports.kwok}",
                "--cidr=10.244.0.0/16",
                "--node-lease-duration-seconds=40",
            ],
            # kwok reads ~/.kwok/kwok.yaml: a home of its own keeps a user's configuration out.
            env={"HOME": str(kwok_dir)},
        )
        secure = "https://127.0.0.1:{}/healthz"
        self.checks.update(
            {
                "kube-controller-manager": lambda: self._http_ok(
                    secure.format(ports.controller_manager), "ok", verify=False
                ),
                "kube-scheduler": lambda: self._http_ok(
                    secure.format(ports.scheduler), "ok", verify=False
                ),
                "kueue": lambda: self._http_ok(f"http://127.0.0.1:{ports.kueue_probe}/readyz"),
                "jobset": lambda: self._http_ok(f"http://127.0.0.1:{ports.jobset_probe}/readyz"),
                "training-operator": lambda: self._http_ok(
                    f"http://127.0.0.1:{ports.training_probe}/readyz"
                ),
                "kwok": lambda: self._http_ok(f"http://127.0.0.1:{ports.kwok}/healthz"),
            }
        )

    @staticmethod
    def _kueue_certificate_secret(certs: Certificates) -> dict:
        """The Secret Kueue's certificate rotator keeps its webhook certificate in, made by us.

        Kueue without its internal certificate management insists on a metrics certificate at
        /etc/kueue/metrics/certs (a fixed path in cmd/kueue), so it runs with it on; its rotator
        keeps a valid certificate it finds in this Secret (and writes it to the webhook server's
        directory and the CA into the webhook configurations and CRDs), and ours is valid for
        127.0.0.1 as well as for the Service name it checks."""
        import base64

        def data(path: Path) -> str:
            return base64.b64encode(path.read_bytes()).decode()

        serving = certs.serving["kueue-webhook"]
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "kueue-webhook-server-cert", "namespace": KUEUE_NAMESPACE},
            "type": "Opaque",
            "data": {
                "ca.crt": data(certs.kueue_ca.cert),
                "ca.key": data(certs.kueue_ca.key),
                "tls.crt": data(serving.cert),
                "tls.key": data(serving.key),
            },
        }

    def _start_kueue(self, binaries, ports, certs, kubeconfigs, level: str) -> None:
        directory = self.layout.component_dir("kueue")
        # The rotator only waits for the files of its Secret to appear (a mounted Secret
        # upstream), so they are written here.
        webhook_certs = pki.install_serving_dir(
            certs.serving["kueue-webhook"], directory / "webhook-certs"
        )
        # Kueue's visibility server reads ./visibility/apiserver.{crt,key} (see cluster/build.py).
        visibility = directory / "visibility"
        visibility.mkdir(exist_ok=True)
        pair = certs.serving["kueue-visibility"]
        shutil.copyfile(pair.cert, visibility / "apiserver.crt")
        shutil.copyfile(pair.key, visibility / "apiserver.key")
        half_life = os.environ.get("FAIR_SHARE_HALF_LIFE_HOURS", "168")
        config = {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "namespace": KUEUE_NAMESPACE,
            "health": {"healthProbeBindAddress": f"127.0.0.1:{ports.kueue_probe}"},
            "metrics": {"bindAddress": "0"},
            "webhook": {
                "host": "127.0.0.1",
                "port": ports.kueue_webhook,
                "certDir": str(webhook_certs),
            },
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": True},
            "visibilityServer": {"bindAddress": "127.0.0.1", "bindPort": ports.kueue_visibility},
            "integrations": {"frameworks": list(KUEUE_FRAMEWORKS)},
            "fairSharing": {
                "preemptionStrategies": ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]
            },
            "admissionFairSharing": {
                "usageHalfLifeTime": f"{half_life}h",
                "usageSamplingInterval": "5m",
                "resourceWeights": {"cpu": 0, "memory": 0},
            },
        }
        config_path = directory / "config.yaml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        self._start(
            "kueue",
            [
                str(binaries["kueue"]),
                f"--config={config_path}",
                f"--kubeconfig={kubeconfigs['kueue']}",
                f"--zap-log-level={level}",
            ],
            env={"KUBECONFIG": str(kubeconfigs["kueue"])},
        )

    def _start_jobset(self, binaries, ports, certs, kubeconfigs, level: str) -> None:
        directory = self.layout.component_dir("jobset")
        webhook_certs = pki.install_serving_dir(
            certs.serving["jobset-webhook"], directory / "webhook-certs"
        )
        config = {
            "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
            "kind": "Configuration",
            "health": {"healthProbeBindAddress": f"127.0.0.1:{ports.jobset_probe}"},
            "metrics": {"bindAddress": "0"},
            "webhook": {
                "host": "127.0.0.1",
                "port": ports.jobset_webhook,
                "certDir": str(webhook_certs),
            },
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
        }
        config_path = directory / "config.yaml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        self._start(
            "jobset",
            [
                str(binaries["jobset"]),
                f"--config={config_path}",
                f"--kubeconfig={kubeconfigs['jobset']}",
                f"--zap-log-level={level}",
            ],
            env={"KUBECONFIG": str(kubeconfigs["jobset"])},
        )

    def _create_nodes(self, api: Api, options: Options) -> None:
        for stage in nodes.stages(options.pod_duration):
            api.apply(stage)
        fleet = nodes.read_fleet(options.fleet)
        created = nodes.fleet_nodes(fleet)
        for node in created:
            try:
                api.create(node)
            except ApiError as exc:
                if exc.status != 409:
                    raise
        names = {n["metadata"]["name"] for n in created}
        self._wait("kwok nodes", lambda: self._nodes_ready(api, names), options.timeout)
        self.log(f"  {len(names)} kwok nodes from {options.fleet}")

    def _nodes_ready(self, api: Api, names: set[str]) -> tuple[bool, str]:
        listing = api.get("/api/v1/nodes")
        ready = {
            n["metadata"]["name"]
            for n in listing.get("items", [])
            if any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in (n.get("status") or {}).get("conditions") or []
            )
        }
        missing = sorted(names - ready)
        return (not missing), f"not ready: {', '.join(missing[:5])}"

    def _wait_webhooks(self, api: Api, options: Options) -> None:
        """Each add-on's webhooks answer (a dry-run create passes through them) and Kueue's
        visibility API is available through the aggregator."""
        probes = {
            "kueue webhooks": {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ResourceFlavor",
                "metadata": {"name": "real-cluster-probe"},
            },
            "kueue job webhook": {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {
                    "name": "real-cluster-probe",
                    "namespace": "default",
                    "labels": {"kueue.x-k8s.io/queue-name": "probe"},
                },
                "spec": {
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [{"name": "probe", "image": "busybox"}],
                        }
                    }
                },
            },
            "jobset webhooks": {
                "apiVersion": "jobset.x-k8s.io/v1alpha2",
                "kind": "JobSet",
                "metadata": {"name": "real-cluster-probe", "namespace": "default"},
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "w",
                            "template": {
                                "spec": {
                                    "template": {
                                        "spec": {
                                            "restartPolicy": "Never",
                                            "containers": [{"name": "w", "image": "busybox"}],
                                        }
                                    }
                                }
                            },
                        }
                    ]
                },
            },
            "training-operator webhooks": {
                "apiVersion": "kubeflow.org/v1",
                "kind": "PyTorchJob",
                "metadata": {"name": "real-cluster-probe", "namespace": "default"},
                "spec": {
                    "pytorchReplicaSpecs": {
                        "Master": {
                            "replicas": 1,
                            "template": {
                                "spec": {"containers": [{"name": "pytorch", "image": "busybox"}]}
                            },
                        }
                    }
                },
            },
        }
        for name, obj in probes.items():
            self._wait(
                name, lambda obj=obj: (bool(api.create(obj, dry_run=True)), ""), options.timeout
            )
        self._wait("kueue visibility API", lambda: self._visibility_ok(api), options.timeout)

    def _visibility_ok(self, api: Api) -> tuple[bool, str]:
        service = api.get(
            "/apis/apiregistration.k8s.io/v1/apiservices/v1beta2.visibility.kueue.x-k8s.io"
        )
        for condition in (service.get("status") or {}).get("conditions") or []:
            if condition["type"] == "Available":
                return condition["status"] == "True", condition.get("message", "")
        return False, "no Available condition yet"

    def _start_exporter(self, ports: Ports, kubeconfig: Path) -> None:
        self._start(
            "dcgm-exporter",
            [
                sys.executable,
                "-m",
                "cluster.dcgm",
                f"--kubeconfig={kubeconfig}",
                "--host=127.0.0.1",
                f"--port={ports.dcgm}",
            ],
            env={"PYTHONPATH": str(REPO)},
        )
        self.checks["dcgm-exporter"] = lambda: self._http_ok(
            f"http://127.0.0.1:{ports.dcgm}/metrics", "DCGM_FI_DEV_GPU_UTIL"
        )

    # -- probes ------------------------------------------------------------------------------

    def _http_ok(self, url: str, expect: str = "", *, verify: bool = True) -> tuple[bool, str]:
        with _quiet_tls():
            response = requests.get(url, timeout=3, verify=verify)
        ok = response.status_code == 200 and expect in response.text
        return ok, f"HTTP {response.status_code} {response.text[:200]}"

    def _api_ok(self, path: str) -> tuple[bool, str]:
        response = self.admin_api().request("GET", path, timeout=3)
        return response.status_code == 200, f"HTTP {response.status_code} {response.text[:300]}"

    # -- down --------------------------------------------------------------------------------

    def down(self) -> None:
        stop_processes(self.layout, log=self.log)


class _quiet_tls:
    """Probing loopback endpoints with self-signed certificates is expected: no warnings."""

    def __enter__(self):
        import warnings

        self._catch = warnings.catch_warnings()
        self._catch.__enter__()
        warnings.simplefilter("ignore", urllib3.exceptions.InsecureRequestWarning)

    def __exit__(self, *exc):
        return self._catch.__exit__(*exc)
