"""Fixtures for kubesim tests: a running kubesim and an official-client ApiClient for it."""

import json
import os
from pathlib import Path

import pytest
from kubernetes import client, config

from tests.fixtures_cluster import kubesim_for_test

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED_DIR = Path(os.environ.get("QM_SHARED_DIR", REPO_ROOT.parent / "shared"))
CRDS_DIR = SHARED_DIR / "crds"

SMALL_FLEET = {
    "pools": [
        {
            "name": "a100",
            "gpuModel": "NVIDIA A100-SXM4-80GB",
            "nodes": 2,
            "gpusPerNode": 8,
            "labels": {"accelerator": "nvidia-a100-80gb"},
            "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        },
        {
            "name": "l4",
            "gpuModel": "NVIDIA L4",
            "nodes": 2,
            "gpusPerNode": 4,
            "labels": {"accelerator": "nvidia-l4"},
        },
    ]
}


@pytest.fixture
def kubesim():
    """A running kubesim with the shared CRDs, a fleet of two pools and the controllers (the
    session's, reset)."""
    with kubesim_for_test(fleet=SMALL_FLEET) as ks:
        yield ks


@pytest.fixture
def k8s(kubesim):
    """An official-client ApiClient configured from kubesim's kubeconfig."""
    api = config.new_client_from_config(kubesim.kubeconfig)
    yield api
    api.close()


@pytest.fixture
def namespace(k8s):
    """A fresh namespace, "team-a"."""
    client.CoreV1Api(k8s).create_namespace({"metadata": {"name": "team-a"}})
    return "team-a"


@pytest.fixture
def raw(k8s):
    """Send a raw request through the client's connection pool: (status, headers, JSON body)."""

    def request(method, path, body=None, content_type="application/json"):
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        resp = k8s.call_api(method, k8s.configuration.host + path, header_params=headers, body=body)
        data = resp.read()
        return resp.status, resp.headers, json.loads(data) if data else None

    return request


@pytest.fixture
def bare_k8s():
    """An ApiClient for a kubesim without controllers (nothing writes behind the test's back)."""
    with kubesim_for_test(controllers=False) as ks:
        api = config.new_client_from_config(ks.kubeconfig)
        yield api
        api.close()
