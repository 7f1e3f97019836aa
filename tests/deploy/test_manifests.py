"""The deployment into Kubernetes (deploy/kubernetes): every overlay renders with kubectl
kustomize; every object is valid Kubernetes (unknown fields refused); pods run as non-root on a
read-only root filesystem with all capabilities dropped, requests and limits, probes on
/healthz; beat never runs twice; the settings of the README's table are all wired; the
rendered objects apply to kubesim by server-side apply; the ClusterRole grants named resources
only (which ones: tests/rbac_record.py checks them against every request of the suite)."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.deploy.k8s_schema import schema_errors
from tests.rbac_record import granted

REPO = Path(__file__).resolve().parents[2]
KUSTOMIZE_DIR = REPO / "deploy" / "kubernetes"
OVERLAYS = ["small", "ha"]
# Settings of the README's table that only `make run` and compose use (kubesim's).
DEV_ONLY = {"KUBESIM_PORT", "KUBESIM_FLEET", "KUBESIM_TIME_SCALE", "KUBESIM_ADVERTISE_URL",
            "KUBESIM_FAIR_SHARING", "KUBESIM_ADMISSION_FAIR_SHARING",
            "QM_SHARED_DIR"}  # fmt: skip
POD_KINDS = ("Deployment", "Job")


def render(overlay: str) -> list[dict]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is missing: scripts/ensure-test-services.sh installs it"
    done = subprocess.run(
        [kubectl, "kustomize", str(KUSTOMIZE_DIR / "overlays" / overlay)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


@pytest.fixture(scope="module", params=OVERLAYS)
def rendered(request):
    return request.param, render(request.param)


def _by_kind(objects, kind, name=None):
    found = [
        o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]
    assert found, f"no {kind} {name or ''}"
    return found


def _pod_specs(objects):
    return [
        (o["metadata"]["name"], o["spec"]["template"]["spec"])
        for o in objects
        if o["kind"] in POD_KINDS
    ]


def test_every_overlay_renders_every_part_and_each_object_is_valid_kubernetes(rendered):
    _, objects = rendered
    kinds = {o["kind"] for o in objects}
    assert kinds == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "Job",
                     "Deployment", "Service", "Ingress", "PodDisruptionBudget",
                     "HorizontalPodAutoscaler"}  # fmt: skip
    assert {o["metadata"]["name"] for o in _by_kind(objects, "Deployment")} == {
        "quartermaster-web",
        "quartermaster-worker",
        "quartermaster-beat",
    }
    for obj in objects:
        assert schema_errors(obj) == [], f"{obj['kind']} {obj['metadata']['name']}"
        if obj["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
            assert obj["metadata"].get("namespace") == "quartermaster"


def test_the_schema_check_refuses_unknown_fields():
    spec = {"replica": 2, "selector": {}, "template": {"spec": {"containers": []}}}
    bad = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"}, "spec": spec}
    assert schema_errors(bad) == ["Deployment.spec: unknown field 'replica'"]


def test_pods_are_locked_down_and_sized(rendered):
    _, objects = rendered
    for name, spec in _pod_specs(objects):
        assert spec["serviceAccountName"] == "quartermaster", name
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        for container in spec["containers"]:
            security = container["securityContext"]
            assert security["readOnlyRootFilesystem"] is True, name
            assert security["allowPrivilegeEscalation"] is False, name
            assert security["capabilities"]["drop"] == ["ALL"], name
            resources = container["resources"]
            assert resources["requests"]["cpu"] and resources["requests"]["memory"], name
            assert resources["limits"]["memory"], name
            # The one entry point, and writable places only where the app writes.
            assert container["args"][0] in ("web", "worker", "beat", "migrate"), name
            assert {m["mountPath"] for m in container["volumeMounts"]} == {"/app/var", "/tmp"}
            assert container["image"] == "registry.example.org/quartermaster:1.0.0", name
    web = _by_kind(objects, "Deployment", "quartermaster-web")[0]["spec"]["template"]["spec"]
    for probe in ("readinessProbe", "livenessProbe"):
        assert web["containers"][0][probe]["httpGet"]["path"] == "/healthz"


def test_beat_runs_once_and_the_sizes_follow_the_overlay(rendered):
    overlay, objects = rendered
    beat = _by_kind(objects, "Deployment", "quartermaster-beat")[0]["spec"]
    assert beat["replicas"] == 1 and beat["strategy"] == {"type": "Recreate"}
    web = _by_kind(objects, "Deployment", "quartermaster-web")[0]["spec"]
    hpa = _by_kind(objects, "HorizontalPodAutoscaler")[0]["spec"]
    pdb = _by_kind(objects, "PodDisruptionBudget")[0]["spec"]
    assert hpa["scaleTargetRef"]["name"] == "quartermaster-web"
    if overlay == "ha":
        assert web["replicas"] == 3 and hpa["minReplicas"] == 3 and pdb == {
            "minAvailable": 2, "selector": pdb["selector"]}  # fmt: skip
        assert web["template"]["spec"]["topologySpreadConstraints"][0]["topologyKey"] == (
            "kubernetes.io/hostname"
        )
    else:
        assert web["replicas"] == 1 and hpa["minReplicas"] == 1 and pdb["maxUnavailable"] == 1


def test_every_setting_of_the_readme_is_wired(rendered):
    _, objects = rendered
    readme = (REPO / "README.md").read_text()
    table = readme.split("## Configuration", 1)[1].split("###", 1)[0]
    settings = set()
    for row in table.splitlines():
        if row.startswith("| `"):
            settings |= set(re.findall(r"`([A-Z][A-Z0-9_]+)`", row.split("|")[1]))
    config = _by_kind(objects, "ConfigMap", "quartermaster-config")[0]["data"]
    for name, spec in _pod_specs(objects):
        container = spec["containers"][0]
        assert container["envFrom"] == [{"configMapRef": {"name": "quartermaster-config"}}]
        from_secret = {
            e["name"] for e in container["env"]
            if e["valueFrom"]["secretKeyRef"]["name"] == "quartermaster-secrets"
        }  # fmt: skip
        missing = settings - DEV_ONLY - set(config) - from_secret
        assert not missing, f"{name}: not set from the ConfigMap or the Secret: {sorted(missing)}"
        assert {"SECRET_KEY", "DATABASE_URL", "CELERY_BROKER_URL"} <= from_secret
        assert not set(config) & from_secret
    # In the cluster, the portal manages the cluster it runs in.
    assert config["KUBECONFIG"] == "" and "localhost" in config["ALLOWED_HOSTS"]


def test_the_cluster_role_names_what_it_grants(rendered):
    _, objects = rendered
    role = _by_kind(objects, "ClusterRole", "quartermaster")[0]
    assert role["rules"]
    for rule in role["rules"]:
        for field in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule[field], rule
    binding = _by_kind(objects, "ClusterRoleBinding", "quartermaster")[0]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "quartermaster", "namespace": "quartermaster"}
    ]
    assert ("", "pods/log", "get") in granted() and ("", "secrets", "patch") in granted()


def test_the_rendered_objects_apply_to_a_cluster(sim_cluster):
    client = sim_cluster.kube
    client.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "quartermaster"}})
    for obj in render("ha"):
        stored = client.apply(obj)
        assert stored["metadata"]["uid"]
        back = client.get(obj["apiVersion"], obj["kind"], obj["metadata"]["name"],
                          obj["metadata"].get("namespace"))  # fmt: skip
        assert back["metadata"].get("labels") == obj["metadata"].get("labels")
        if obj["kind"] == "Deployment":
            assert back["spec"]["template"]["spec"]["containers"][0]["image"] == (
                "registry.example.org/quartermaster:1.0.0"
            )
    # Applying again changes nothing (the manifests are stable under server-side apply).
    for obj in render("ha"):
        before = client.get(obj["apiVersion"], obj["kind"], obj["metadata"]["name"],
                            obj["metadata"].get("namespace"))  # fmt: skip
        after = client.apply(obj)
        assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


def test_the_image_is_built_non_root_with_static_files_and_one_entry_point():
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "collectstatic" in dockerfile
    assert re.search(r"^USER (?!root)\S+", dockerfile, re.M)
    assert 'CMD ["scripts/serve", "web"]' in dockerfile
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    commands = {str(s.get("command")) for s in compose["services"].values() if "build" in s}
    assert all("scripts/serve" in c for c in commands), commands
