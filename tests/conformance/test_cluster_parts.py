"""The parts of cluster/ that need no running control plane: kwok nodes from a fleet file, the
kwok stages, the add-ons' manifests turned to loopback, the exporter's device allocation, the
certificates and the build's cache key. These run in `make test` as well."""

from __future__ import annotations

import base64
import subprocess

import pytest
import yaml
from cryptography import x509

from cluster import addons, build, credentials, dcgm, nodes, pki
from kubesim import resources
from kubesim.dcgm import render
from kubesim.fleet import SHARED_GPU

FLEET = {
    "pools": [
        {"name": "plain", "gpuModel": "NVIDIA L4", "nodes": 1, "gpusPerNode": 2},
        {
            "name": "sliced",
            "gpuModel": "NVIDIA L4",
            "nodes": 1,
            "gpusPerNode": 2,
            "timeSlicing": {"replicas": 4},
        },
        {
            "name": "renamed",
            "gpuModel": "NVIDIA L4",
            "nodes": 1,
            "gpusPerNode": 2,
            "timeSlicing": {"replicas": 4, "renameByDefault": True},
        },
        {
            "name": "mig",
            "gpuModel": "NVIDIA A100-SXM4-40GB",
            "nodes": 1,
            "gpusPerNode": 1,
            "mig": {"profile": "1g.5gb", "perGpu": 7},
        },
    ]
}


def _by_name(node_list):
    return {n["metadata"]["name"]: n for n in node_list}


def test_fleet_nodes_are_kubesims_nodes_for_kwok_with_renamed_shared_gpus():
    made = _by_name(nodes.fleet_nodes(FLEET))
    for node in made.values():
        assert node["metadata"]["annotations"][nodes.KWOK_ANNOTATION] == "fake"
        assert "conditions" not in node["status"]  # kwok's node stage writes them
    assert made["plain-node-0"]["status"]["capacity"]["nvidia.com/gpu"] == "2"
    sliced = made["sliced-node-0"]
    assert sliced["status"]["capacity"]["nvidia.com/gpu"] == "8"
    assert sliced["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-L4-SHARED"
    renamed = made["renamed-node-0"]
    for key in ("capacity", "allocatable"):
        assert renamed["status"][key][SHARED_GPU] == "8"
        assert "nvidia.com/gpu" not in renamed["status"][key]
    labels = renamed["metadata"]["labels"]
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-L4"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert made["mig-node-0"]["status"]["capacity"]["nvidia.com/mig-1g.5gb"] == "7"


def test_stages_carry_the_default_duration_and_select_what_kubelets_would():
    staged = {s["metadata"]["name"]: s for s in nodes.stages("90s")}
    assert set(staged) == {
        "qm-node-initialize",
        "qm-node-heartbeat",
        "qm-pod-start",
        "qm-pod-finish",
        "qm-pod-terminate",
        "qm-pod-remove",
    }
    finish = staged["qm-pod-finish"]["spec"]
    assert finish["delay"]["durationMilliseconds"] == 90000
    assert '// "90s"' in finish["delay"]["durationFrom"]["jq"]["expression"]
    assert "QM_DEFAULT" not in yaml.safe_dump(list(staged.values()))
    selected = {e["key"]: e.get("values") for e in finish["selector"]["matchExpressions"]}
    assert selected[".spec.restartPolicy"] == ["Never", "OnFailure"]  # Always runs on


@pytest.mark.parametrize(
    ("text", "seconds"), [("10s", 10), ("2m", 120), ("1h30m", 5400), ("500ms", 0.5), ("7", 7)]
)
def test_durations_read_as_go_writes_them(text, seconds):
    assert nodes._seconds(text) == seconds


def test_a_duration_that_is_not_one_is_refused():
    with pytest.raises(ValueError):
        nodes.stages("ten seconds")


def _write(path, docs):
    path.write_text(yaml.safe_dump_all(docs))


def test_webhooks_read_with_their_kustomize_patches_and_served_on_loopback(tmp_path):
    hook = {
        "name": "vpod.kb.io",
        "clientConfig": {"service": {"name": "svc", "namespace": "system", "path": "/validate"}},
        "rules": [{"apiGroups": [""], "resources": ["pods"]}],
    }
    _write(
        tmp_path / "manifests.yaml",
        [
            {
                "kind": "ValidatingWebhookConfiguration",
                "metadata": {"name": "validating-webhook-configuration"},
                "webhooks": [hook, {**hook, "name": "vjob.kb.io"}],
            }
        ],
    )
    selector = {"matchExpressions": [{"key": "ns", "operator": "NotIn", "values": ["kube-system"]}]}
    kustomization = {
        "resources": ["manifests.yaml"],
        "patches": [
            {
                "patch": yaml.safe_dump(
                    {
                        "kind": "ValidatingWebhookConfiguration",
                        "metadata": {"name": "validating-webhook-configuration"},
                        "webhooks": [{"name": "vpod.kb.io", "namespaceSelector": selector}],
                    }
                )
            },
            {"path": "json.yaml", "target": {"kind": "ValidatingWebhookConfiguration"}},
        ],
        "replacements": [
            {
                "source": {
                    "kind": "ValidatingWebhookConfiguration",
                    "fieldPath": "webhooks.[name=vpod.kb.io].namespaceSelector",
                },
                "targets": [
                    {
                        "select": {"kind": "ValidatingWebhookConfiguration"},
                        "fieldPaths": ["webhooks.[name=vjob.kb.io].namespaceSelector"],
                    }
                ],
            }
        ],
    }
    (tmp_path / "json.yaml").write_text(
        yaml.safe_dump([{"op": "replace", "path": "/webhooks/1/failurePolicy", "value": "Ignore"}])
    )
    _write(tmp_path / "kustomization.yaml", [kustomization])
    (config,) = addons.webhooks_with_patches(tmp_path)
    pod, job = config["webhooks"]
    assert pod["namespaceSelector"] == selector == job["namespaceSelector"]
    assert job["failurePolicy"] == "Ignore"
    served = addons.loopback_webhooks(config, name="x-validating", port=9443, bundle="Q0E=")
    assert served["metadata"]["name"] == "x-validating"
    for webhook in served["webhooks"]:
        assert webhook["clientConfig"] == {
            "url": "https://127.0.0.1:9443/validate",
            "caBundle": "Q0E=",
        }


def test_crds_get_their_conversion_webhook_on_loopback(tmp_path):
    crd = {"kind": "CustomResourceDefinition", "metadata": {"name": "things.x.io"}, "spec": {}}
    _write(tmp_path / "things.yaml", [crd])
    patch = {
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "things.x.io"},
        "spec": {
            "conversion": {
                "strategy": "Webhook",
                "webhook": {"clientConfig": {"service": {"name": "s", "path": "/convert"}}},
            }
        },
    }
    _write(tmp_path / "patch.yaml", [patch])
    _write(
        tmp_path / "kustomization.yaml",
        [{"resources": ["things.yaml"], "patches": [{"path": "patch.yaml"}]}],
    )
    (read,) = addons.crds_with_patches(tmp_path)
    served = addons.loopback_conversion(read, port=7443, bundle="Q0E=")
    assert served["spec"]["conversion"]["webhook"]["clientConfig"] == {
        "url": "https://127.0.0.1:7443/convert",
        "caBundle": "Q0E=",
    }


def _pod(uid, node, resource, count, phase="Running"):
    return {
        "metadata": {"uid": uid, "name": uid, "namespace": "team"},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "main", "resources": {"limits": {resource: str(count)}}}],
        },
        "status": {"phase": phase},
    }


def test_exporter_gives_pods_the_lowest_free_devices_and_keeps_them_while_they_run():
    view = dcgm.FleetView()
    for node in nodes.fleet_nodes(FLEET):
        view.set_node(node)
    view.set_pod(_pod("a", "renamed-node-0", SHARED_GPU, 3))
    view.set_pod(_pod("b", "renamed-node-0", SHARED_GPU, 2))
    assert view.devices["a"] == ("renamed-node-0", [0, 1, 2])
    assert view.devices["b"] == ("renamed-node-0", [3, 4])
    view.set_pod(_pod("a", "renamed-node-0", SHARED_GPU, 3, phase="Succeeded"))
    view.set_pod(_pod("b", "renamed-node-0", SHARED_GPU, 2))  # an update keeps its devices
    view.set_pod(_pod("c", "renamed-node-0", SHARED_GPU, 4))
    assert view.devices["b"] == ("renamed-node-0", [3, 4])
    assert view.devices["c"] == ("renamed-node-0", [0, 1, 2, 5])
    text = render(view)
    series = [line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_GPU_UTIL{")]
    assert len(series) == 2 + 8 + 8 + 7  # a series per GPU, time-sliced replica, MIG instance
    held = [line for line in series if 'Hostname="renamed-node-0"' in line]
    assert len(held) == 8  # one per time-sliced replica of the renamed node's 2 GPUs
    assert sum('pod="c"' in line for line in held) == 4
    assert sum('pod="b"' in line for line in held) == 2
    assert not any('pod="a"' in line for line in held)
    assert [n["metadata"]["name"] for n in view.list(resources.NODES)] == [
        "plain-node-0",
        "sliced-node-0",
        "renamed-node-0",
        "mig-node-0",
    ]


def test_certificates_are_remade_when_their_ca_or_names_change(tmp_path):
    ca = pki.ensure_ca(tmp_path, "ca", "test-ca")
    leaf = pki.ensure_cert(
        tmp_path, "leaf", ca, common_name="leaf", server_names=("127.0.0.1", "svc.ns.svc")
    )
    first = leaf.cert.read_bytes()
    names = ("127.0.0.1", "svc.ns.svc")
    kept = pki.ensure_cert(tmp_path, "leaf", ca, common_name="leaf", server_names=names)
    assert kept.cert.read_bytes() == first
    renamed = pki.ensure_cert(tmp_path, "leaf", ca, common_name="leaf", server_names=names[:1])
    assert renamed.cert.read_bytes() != first  # a name less: made again
    first = renamed.cert.read_bytes()
    ca.cert.unlink()
    ca = pki.ensure_ca(tmp_path, "ca", "test-ca")
    again = pki.ensure_cert(tmp_path, "leaf", ca, common_name="leaf", server_names=("127.0.0.1",))
    cert = x509.load_pem_x509_certificate(again.cert.read_bytes())
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate(ca.cert.read_bytes()))
    assert again.cert.read_bytes() != first


def test_a_named_ca_carries_its_name_and_an_rsa_key_in_pkcs1(tmp_path):
    ca = pki.ensure_ca(tmp_path, "kueue-ca", "kueue-ca", dns_name="kueue-ca", use_rsa=True)
    cert = x509.load_pem_x509_certificate(ca.cert.read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["kueue-ca"]
    assert ca.key.read_text().startswith("-----BEGIN RSA PRIVATE KEY-----")


def test_binaries_report_the_versions_go_mod_pins():
    pinned = build.required_versions(build.MODULES_DIR / "k8s")
    kubernetes = pinned["k8s.io/kubernetes"]
    module = next(m for m in build.MODULES if m.directory == "k8s")
    flags = build.ldflags(module, build.MODULES_DIR / "k8s")
    assert f"-X k8s.io/component-base/version.gitVersion={kubernetes}" in flags
    assert f"-X k8s.io/component-base/version.gitMinor={kubernetes.split('.')[1]}" in flags
    assert f"-X sigs.k8s.io/kueue/pkg/version.GitVersion={pinned['sigs.k8s.io/kueue']}" in flags
    # The staging modules are replaced to the release's own versions.
    assert pinned["k8s.io/api"] == "v0." + kubernetes.removeprefix("v1.")


def test_the_cache_key_follows_go_sum(tmp_path):
    module = build.Module("m", (build.Binary("x", "."),))
    (tmp_path / "go.mod").write_text("module m\n\ngo 1.26.0\n")
    (tmp_path / "go.sum").write_text("a v1 h1:x\n")
    first = build.module_key(module, tmp_path, "-s -w", "go1.26")
    assert build.module_key(module, tmp_path, "-s -w", "go1.26") == first
    (tmp_path / "go.sum").write_text("a v2 h1:y\n")
    assert build.module_key(module, tmp_path, "-s -w", "go1.26") != first
    assert build.module_key(module, tmp_path, "-s -w -X a.b=c", "go1.26") != first


def test_the_go_modules_are_tidy_and_pin_every_version(go_modules):
    """go.mod and go.sum say everything the build needs (`go mod tidy -diff` finds nothing)."""
    for directory in go_modules:
        result = subprocess.run(
            ["go", "mod", "tidy", "-diff"],
            cwd=directory,
            env=build.go_env(),
            capture_output=True,
            text=True,
        )
        assert result.returncode == 0, f"{directory}: {result.stdout}{result.stderr}"


def test_the_kubeconfig_embeds_what_a_client_needs(tmp_path):
    ca = pki.ensure_ca(tmp_path, "ca", "test-ca")
    pair = pki.ensure_cert(tmp_path, "admin", ca, common_name="admin", client=True)
    path = credentials.write_kubeconfig(
        tmp_path / "kubeconfig", server="https://127.0.0.1:6443", ca=ca.cert, pair=pair, user="u"
    )
    config = yaml.safe_load(path.read_text())
    cluster = config["clusters"][0]["cluster"]
    assert base64.b64decode(cluster["certificate-authority-data"]) == ca.cert.read_bytes()
    assert config["current-context"] == "real-cluster"
    assert path.stat().st_mode & 0o077 == 0
