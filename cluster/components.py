"""How each component of the local control plane is started and how to tell it is ready: its
command line (and the configuration files and certificates it reads), all on 127.0.0.1."""

from __future__ import annotations

import os
import shutil
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path

import requests
import urllib3
import yaml

from cluster import credentials, nodes, pki
from cluster.processes import REPO, Layout, free_port

SERVICE_RANGE = "10.96.0.0/16"
ADMISSION_PLUGINS = (
    "NamespaceLifecycle,LimitRanger,ServiceAccount,ResourceQuota,DefaultTolerationSeconds,"
    "Priority,NodeRestriction,MutatingAdmissionWebhook,ValidatingAdmissionWebhook,"
    "ValidatingAdmissionPolicy"
)
KUEUE_FRAMEWORKS = ("batch/job", "kubeflow.org/pytorchjob", "jobset.x-k8s.io/jobset")
TRAINING_KINDS = ("PyTorchJob",)

Probe = Callable[[], tuple[bool, str]]


@dataclass
class Ports:
    """The loopback ports of one start (free ones unless given)."""

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
    def allocate(cls, **given: int | None) -> Ports:
        return cls(**{f.name: given.get(f.name) or free_port() for f in fields(cls)})


@dataclass
class Component:
    """A process to start: its command, environment, and the probe that says it is ready."""

    name: str
    argv: list[str]
    probe: Probe
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class Context:
    """What the command lines are made of."""

    layout: Layout
    binaries: dict[str, Path]
    ports: Ports
    certs: credentials.Certificates
    kubeconfigs: dict[str, Path]
    log_level: int = 2

    def bin(self, name: str) -> str:
        return str(self.binaries[name])


def http_probe(url: str, expect: str = "", *, verify: bool | str = True, cert=None) -> Probe:
    """Ready when url answers 200 with expect in its body."""

    def probe() -> tuple[bool, str]:
        with warnings.catch_warnings():
            # Loopback endpoints with self-signed certificates are probed without verification.
            warnings.simplefilter("ignore", urllib3.exceptions.InsecureRequestWarning)
            response = requests.get(url, timeout=3, verify=verify, cert=cert)
        ok = response.status_code == 200 and expect in response.text
        return ok, f"HTTP {response.status_code} {response.text[:300]}"

    return probe


def _secure_healthz(port: int) -> Probe:
    return http_probe(f"https://127.0.0.1:{port}/healthz", "ok", verify=False)


def etcd(ctx: Context) -> Component:
    data = ctx.layout.component_dir("etcd") / "data"
    # A fresh cluster on every start: nothing of a previous run's objects is left.
    shutil.rmtree(data, ignore_errors=True)
    peer = f"http://127.0.0.1:{ctx.ports.etcd_peer}"
    client = f"http://127.0.0.1:{ctx.ports.etcd}"
    argv = [
        ctx.bin("etcd"),
        "--name=real-cluster",
        f"--data-dir={data}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=real-cluster={peer}",
        "--initial-cluster-state=new",
        # A throw-away test cluster: no fsync (the disk is shared with everything else).
        "--unsafe-no-fsync",
        "--log-level=warn",
    ]
    return Component("etcd", argv, http_probe(f"{client}/health", '"health":"true"'))


def kube_apiserver(ctx: Context) -> Component:
    certs, ports = ctx.certs, ctx.ports
    argv = [
        ctx.bin("kube-apiserver"),
        f"--etcd-servers=http://127.0.0.1:{ports.etcd}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={ports.apiserver}",
        f"--cert-dir={ctx.layout.pki}",
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
        # The `kubernetes` Service cannot point at a loopback address; nothing in this cluster
        # reaches the API server through it.
        "--endpoint-reconciler-type=none",
    ]
    admin = certs.clients["admin"]
    probe = http_probe(
        f"https://127.0.0.1:{ports.apiserver}/readyz",
        "ok",
        verify=str(certs.ca.cert),
        cert=(str(admin.cert), str(admin.key)),
    )
    return Component("kube-apiserver", argv, probe)


def _kube_component(ctx: Context, name: str, port: int) -> list[str]:
    """The flags the controller manager and the scheduler share: their identity (also to check
    who calls their own endpoints), secure serving on loopback, no leader election."""
    kubeconfig = str(ctx.kubeconfigs[name])
    return [
        ctx.bin(name),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={ctx.layout.component_dir(name)}",
        "--leader-elect=false",
        f"--v={min(ctx.log_level, 2)}",
    ]


def kube_controller_manager(ctx: Context) -> Component:
    argv = [
        *_kube_component(ctx, "kube-controller-manager", ctx.ports.controller_manager),
        f"--client-ca-file={ctx.certs.ca.cert}",
        f"--root-ca-file={ctx.certs.ca.cert}",
        f"--service-account-private-key-file={ctx.certs.service_accounts.key}",
        "--use-service-account-credentials=true",
        f"--cluster-signing-cert-file={ctx.certs.ca.cert}",
        f"--cluster-signing-key-file={ctx.certs.ca.key}",
        f"--service-cluster-ip-range={SERVICE_RANGE}",
        "--controllers=*",
    ]
    return Component("kube-controller-manager", argv, _secure_healthz(ctx.ports.controller_manager))


def kube_scheduler(ctx: Context) -> Component:
    argv = _kube_component(ctx, "kube-scheduler", ctx.ports.scheduler)
    return Component("kube-scheduler", argv, _secure_healthz(ctx.ports.scheduler))


def kueue(ctx: Context) -> Component:
    """Kueue as the portal expects it (scripts/serve starts kubesim's the same way): the batch
    Job, PyTorchJob and JobSet integrations, fair sharing, and admission fair sharing with the
    portal's half-life counting GPUs only; topology-aware scheduling is on by default."""
    ports, directory = ctx.ports, ctx.layout.component_dir("kueue")
    # Kueue's rotator only waits for its Secret's files to appear (a mounted Secret upstream).
    webhook_certs = pki.install_serving_dir(
        ctx.certs.serving["kueue-webhook"], directory / "webhook-certs"
    )
    # The visibility server reads ./visibility/apiserver.{crt,key} (see cluster/build.py).
    visibility = directory / "visibility"
    visibility.mkdir(exist_ok=True)
    pair = ctx.certs.serving["kueue-visibility"]
    shutil.copyfile(pair.cert, visibility / "apiserver.crt")
    shutil.copyfile(pair.key, visibility / "apiserver.key")
    half_life = os.environ.get("FAIR_SHARE_HALF_LIFE_HOURS", "168")
    config = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": credentials.KUEUE_NAMESPACE,
        **_manager_settings(ports.kueue_probe, ports.kueue_webhook, webhook_certs),
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
    return _manager(ctx, "kueue", config, ports.kueue_probe)


def jobset(ctx: Context) -> Component:
    ports = ctx.ports
    webhook_certs = pki.install_serving_dir(
        ctx.certs.serving["jobset-webhook"], ctx.layout.component_dir("jobset") / "webhook-certs"
    )
    config = {
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        **_manager_settings(ports.jobset_probe, ports.jobset_webhook, webhook_certs),
        "internalCertManagement": {"enable": False},
    }
    return _manager(ctx, "jobset", config, ports.jobset_probe)


def _manager_settings(probe_port: int, webhook_port: int, cert_dir: Path) -> dict:
    """The controller-runtime manager settings Kueue's and JobSet's configurations share: on
    loopback, no metrics endpoint, no leader election."""
    return {
        "health": {"healthProbeBindAddress": f"127.0.0.1:{probe_port}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
    }


def _manager(ctx: Context, name: str, config: dict, probe_port: int) -> Component:
    """A controller manager started with its configuration file (Kueue, JobSet)."""
    config_path = ctx.layout.component_dir(name) / "config.yaml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    kubeconfig = str(ctx.kubeconfigs[name])
    argv = [
        ctx.bin(name),
        f"--config={config_path}",
        f"--kubeconfig={kubeconfig}",
        f"--zap-log-level={ctx.log_level}",
    ]
    probe = http_probe(f"http://127.0.0.1:{probe_port}/readyz")
    return Component(name, argv, probe, {"KUBECONFIG": kubeconfig})


def training_operator(ctx: Context) -> Component:
    ports = ctx.ports
    certs = pki.install_serving_dir(
        ctx.certs.serving["training-operator-webhook"],
        ctx.layout.component_dir("training-operator") / "certs",
    )
    argv = [
        ctx.bin("training-operator"),
        *[f"--enable-scheme={kind.lower()}" for kind in TRAINING_KINDS],
        "--webhook-host=127.0.0.1",
        f"--webhook-port={ports.training_webhook}",
        f"--webhook-cert-dir={certs}",
        f"--health-probe-bind-address=127.0.0.1:{ports.training_probe}",
        "--metrics-bind-address=0",
        f"--zap-log-level={ctx.log_level}",
    ]
    probe = http_probe(f"http://127.0.0.1:{ports.training_probe}/readyz")
    env = {"KUBECONFIG": str(ctx.kubeconfigs["training-operator"])}
    return Component("training-operator", argv, probe, env)


def kwok(ctx: Context) -> Component:
    """kwok for the nodes annotated kwok.x-k8s.io/node=fake, with our Stage objects; every node's
    address is 127.0.0.1 and its kubelet port kwok's own server."""
    port = ctx.ports.kwok
    argv = [
        ctx.bin("kwok"),
        f"--kubeconfig={ctx.kubeconfigs['kwok']}",
        f"--manage-nodes-with-annotation-selector={nodes.KWOK_ANNOTATION}=fake",
        "--enable-crds=Stage",
        f"--server-address=127.0.0.1:{port}",
        "--node-ip=127.0.0.1",
        f"--node-port={port}",
        "--cidr=10.244.0.0/16",
        "--node-lease-duration-seconds=40",
    ]
    probe = http_probe(f"http://127.0.0.1:{port}/healthz")
    # kwok also reads ~/.kwok/kwok.yaml: a home of its own keeps a user's configuration out.
    return Component("kwok", argv, probe, {"HOME": str(ctx.layout.component_dir("kwok"))})


def dcgm_exporter(ctx: Context) -> Component:
    port = ctx.ports.dcgm
    argv = [
        sys.executable,
        "-m",
        "cluster.dcgm",
        f"--kubeconfig={ctx.kubeconfigs['dcgm-exporter']}",
        "--host=127.0.0.1",
        f"--port={port}",
    ]
    probe = http_probe(f"http://127.0.0.1:{port}/metrics", "DCGM_FI_DEV_GPU_UTIL")
    return Component("dcgm-exporter", argv, probe, {"PYTHONPATH": str(REPO)})


# In the order they start; the add-ons after the CRDs and webhooks are installed, the exporter
# after the nodes exist.
CONTROL_PLANE = (etcd, kube_apiserver)
CONTROLLERS = (kube_controller_manager, kube_scheduler, kueue, jobset, training_operator, kwok)
EXPORTERS = (dcgm_exporter,)
NAMES = [f.__name__.replace("_", "-") for f in (*CONTROL_PLANE, *CONTROLLERS, *EXPORTERS)]
