"""Inside a pod, with KUBECONFIG empty, the portal registers the cluster it runs in once and
reaches it with the pod's ServiceAccount (token and CA mounted by Kubernetes)."""

import os

import pytest
from kubernetes.config import incluster_config

from fleet import kube
from fleet.models import Cluster
from fleet.services.clusters import cluster_register_from_settings


@pytest.fixture
def in_a_pod(tmp_path, monkeypatch, settings):
    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text("service-account-token")
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    monkeypatch.setenv(incluster_config.SERVICE_HOST_ENV_NAME, "10.96.0.1")
    monkeypatch.setenv(incluster_config.SERVICE_PORT_ENV_NAME, "443")
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(ca))
    settings.KUBECONFIG = ""
    settings.KUBE_CLUSTER_NAME = "gpu-east"
    yield
    kube.clear_client_cache()


def test_the_cluster_the_portal_runs_in_is_registered_once(db, in_a_pod):
    cluster, said = cluster_register_from_settings()
    assert said == "registered cluster gpu-east, the one the portal runs in"
    assert cluster.in_cluster and cluster.is_default and not cluster.kubeconfig_path
    again, said = cluster_register_from_settings()
    assert again.pk == cluster.pk and "already" in said
    assert Cluster.objects.count() == 1
    # Its client speaks HTTPS to the API server's Service with the pod's token.
    configuration = kube.build_api_client(in_cluster=True).configuration
    assert configuration.host == "https://10.96.0.1:443"
    assert configuration.api_key["BearerToken"].lower() == "bearer service-account-token"


def test_outside_a_pod_an_empty_kubeconfig_registers_nothing(db, settings, monkeypatch):
    monkeypatch.delenv(incluster_config.SERVICE_HOST_ENV_NAME, raising=False)
    settings.KUBECONFIG = ""
    cluster, said = cluster_register_from_settings()
    assert cluster is None and "nothing registered" in said
    assert not Cluster.objects.exists()


def test_a_pod_without_a_token_registers_the_cluster_it_runs_in(db, in_a_pod):
    """The migration Job's pod has no token (it never calls the API): registration writes the
    row; web and workers reach the cluster with their own accounts' tokens."""
    os.remove(incluster_config.SERVICE_TOKEN_FILENAME)
    cluster, said = cluster_register_from_settings()
    assert said == "registered cluster gpu-east, the one the portal runs in"
    assert cluster.in_cluster
