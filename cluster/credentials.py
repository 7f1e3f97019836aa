"""Who is who in the local control plane: the certificates each component serves or presents,
the kubeconfigs they read, and the Secret that hands Kueue its webhook certificate."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path

import yaml

from cluster import pki

KUEUE_NAMESPACE = "kueue-system"
# Client identities: the controller manager and scheduler as kubeadm names them (their bootstrap
# RBAC roles apply); the add-ons and our tools as cluster administrators.
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
# Serving certificates of the webhook servers, signed by the cluster CA: loopback plus the name
# upstream's Service would give them.
SERVING = {
    "jobset-webhook": ("jobset-webhook-service.jobset-system.svc",),
    "training-operator-webhook": ("training-operator.kubeflow.svc",),
}
# Kueue's, signed by a CA of its own (see kueue_certificate_secret).
KUEUE_SERVING = {
    "kueue-webhook": (f"kueue-webhook-service.{KUEUE_NAMESPACE}.svc",),
    "kueue-visibility": (f"visibility-server.{KUEUE_NAMESPACE}.svc",),
}


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


def make_certificates(directory: Path) -> Certificates:
    """Everything the components need, made unless it exists (and is signed by its CA)."""
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
    # Kueue's certificate rotator checks its CA by the name "kueue-ca" and reads its key only
    # as PKCS#1 RSA.
    kueue_ca = pki.ensure_ca(directory, "kueue-ca", "kueue-ca", dns_name="kueue-ca", use_rsa=True)
    serving = {}
    for signer, names in ((ca, SERVING), (kueue_ca, KUEUE_SERVING)):
        for name, dns in names.items():
            serving[name] = pki.ensure_cert(
                directory,
                f"serving-{name}",
                signer,
                common_name=dns[0],
                server_names=(*pki.LOOPBACK_NAMES, *dns),
            )
    sa = pki.ensure_signing_key(directory, "service-accounts")
    return Certificates(
        ca, front, apiserver, front_client, kubelet_client, sa, clients, serving, kueue_ca
    )


def _data(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def write_kubeconfig(path: Path, *, server: str, ca: Path, pair: pki.Pair, user: str) -> Path:
    """A kubeconfig with its certificates embedded (it may be copied elsewhere and still work)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "real-cluster",
                "cluster": {"server": server, "certificate-authority-data": _data(ca)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": _data(pair.cert),
                    "client-key-data": _data(pair.key),
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


def kueue_certificate_secret(certs: Certificates) -> dict:
    """The Secret Kueue's certificate rotator keeps its webhook certificate in, made by us.

    Kueue without its internal certificate management insists on a metrics certificate at
    /etc/kueue/metrics/certs (a fixed path in cmd/kueue), so it runs with it on. Its rotator
    keeps a valid certificate it finds in this Secret (and puts the CA into the webhook
    configurations and CRDs), and ours is valid for 127.0.0.1 as well as for the Service name
    the rotator checks."""
    serving = certs.serving["kueue-webhook"]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "kueue-webhook-server-cert", "namespace": KUEUE_NAMESPACE},
        "type": "Opaque",
        "data": {
            "ca.crt": _data(certs.kueue_ca.cert),
            "ca.key": _data(certs.kueue_ca.key),
            "tls.crt": _data(serving.cert),
            "tls.key": _data(serving.key),
        },
    }
