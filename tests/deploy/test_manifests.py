"""The deployment into Kubernetes as kustomize renders it (deploy/kubernetes/<shape>, the chart's
output; tests/deploy/test_chart.py checks they are the same): every object is valid Kubernetes
(unknown fields refused); pods run as non-root on a read-only root filesystem with all
capabilities dropped, requests and limits; each process has its own ServiceAccount, with a
token only where it calls the API; liveness apart from readiness; the migration Job named per
release and the pods waiting for its schema; workers given time to finish on SIGTERM; images
pinned by digest; NetworkPolicies; beat never runs twice; the settings of the README's table
all wired; the roles grant named resources only (which ones: tests/rbac_record.py checks them
against every request of the suite), and the admission policy holds the portal's accounts; the
rendered objects apply to kubesim by server-side apply."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.deploy.k8s_schema import schema_errors
from tests.rbac_record import check, granted, granted_by_component, team_namespace_roles

REPO = Path(__file__).resolve().parents[2]
KUSTOMIZE_DIR = REPO / "deploy" / "kubernetes"
SHAPES = ["small", "ha"]
# Settings of the README's table that only `make run` and compose use (kubesim's).
DEV_ONLY = {"KUBESIM_PORT", "KUBESIM_FLEET", "KUBESIM_TIME_SCALE", "KUBESIM_ADVERTISE_URL",
            "KUBESIM_FAIR_SHARING", "KUBESIM_ADMISSION_FAIR_SHARING",
            "QM_SHARED_DIR", "OIDC_DEMO_PORT", "KUBESIM_LAB_PORT"}  # fmt: skip
SECRET_SETTINGS = {"SECRET_KEY", "DATABASE_URL", "CELERY_BROKER_URL", "CACHE_URL",
                   "METRICS_TOKEN", "OIDC_CLIENT_SECRET"}  # fmt: skip
POD_KINDS = ("Deployment", "Job")
COMPONENTS = ("web", "worker", "beat", "migrate")
DIGEST = re.compile(r"^registry\.example\.org/quartermaster:1\.0\.0@sha256:[0-9a-f]{64}$")
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy",
                  "ValidatingAdmissionPolicyBinding"}  # fmt: skip


def render(shape: str) -> list[dict]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is missing: scripts/ensure-test-services.sh installs it"
    done = subprocess.run(
        [kubectl, "kustomize", str(KUSTOMIZE_DIR / shape)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


@pytest.fixture(scope="module", params=SHAPES)
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


def _component(objects, component) -> dict:
    """The pod spec of a component (the Deployment, or the migration Job)."""
    for obj in objects:
        labels = obj["metadata"].get("labels") or {}
        if obj["kind"] in POD_KINDS and labels.get("app.kubernetes.io/component") == component:
            return obj["spec"]["template"]["spec"]
    raise AssertionError(f"no pods of {component}")


def test_every_shape_renders_every_part_and_each_object_is_valid_kubernetes(rendered):
    _, objects = rendered
    kinds = {o["kind"] for o in objects}
    assert kinds == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "Job",
                     "Deployment", "Service", "Ingress", "PodDisruptionBudget",
                     "HorizontalPodAutoscaler", "NetworkPolicy", "ValidatingAdmissionPolicy",
                     "ValidatingAdmissionPolicyBinding"}  # fmt: skip
    assert {o["metadata"]["name"] for o in _by_kind(objects, "Deployment")} == {
        "quartermaster-web",
        "quartermaster-worker",
        "quartermaster-beat",
    }
    for obj in objects:
        assert schema_errors(obj) == [], f"{obj['kind']} {obj['metadata']['name']}"
        if obj["kind"] not in CLUSTER_SCOPED:
            assert obj["metadata"].get("namespace") == "quartermaster"


def test_the_schema_check_refuses_unknown_fields():
    spec = {"replica": 2, "selector": {}, "template": {"spec": {"containers": []}}}
    bad = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"}, "spec": spec}
    assert schema_errors(bad) == ["Deployment.spec: unknown field 'replica'"]


def test_pods_are_locked_down_and_sized(rendered):
    _, objects = rendered
    for name, spec in _pod_specs(objects):
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        for container in spec["containers"] + spec.get("initContainers", []):
            security = container["securityContext"]
            assert security["readOnlyRootFilesystem"] is True, name
            assert security["allowPrivilegeEscalation"] is False, name
            assert security["capabilities"]["drop"] == ["ALL"], name
            resources = container["resources"]
            assert resources["requests"]["cpu"] and resources["requests"]["memory"], name
            assert resources["limits"]["memory"], name
            # The one entry point, and writable places only where the app writes.
            assert container["command"] == ["scripts/serve"], name
            assert container["args"][0] in (*COMPONENTS, "wait-for-schema"), name
            assert {m["mountPath"] for m in container["volumeMounts"]} == {"/app/var", "/tmp"}


def test_images_are_pinned_by_digest(rendered):
    _, objects = rendered
    for name, spec in _pod_specs(objects):
        for container in spec["containers"] + spec.get("initContainers", []):
            assert DIGEST.match(container["image"]), (name, container["image"])


def test_each_process_has_its_own_account_and_a_token_only_where_it_calls_the_api(rendered):
    _, objects = rendered
    accounts = {a["metadata"]["name"]: a for a in _by_kind(objects, "ServiceAccount")}
    assert set(accounts) == {f"quartermaster-{c}" for c in COMPONENTS}
    for component in COMPONENTS:
        spec = _component(objects, component)
        account = f"quartermaster-{component}"
        assert spec["serviceAccountName"] == account
        needs_token = component in ("web", "worker")
        assert accounts[account]["automountServiceAccountToken"] is needs_token
        assert spec.get("automountServiceAccountToken", True) is needs_token, component
    # Only web and workers are bound to a role; beat and migrate to none.
    bound = {
        s["name"] for b in _by_kind(objects, "ClusterRoleBinding") for s in b["subjects"]
    }  # fmt: skip
    assert bound == {"quartermaster-web", "quartermaster-worker"}
    grants = granted_by_component(objects)
    assert grants["beat"] == set() and grants["migrate"] == set()
    # Web reads; it writes only what cannot wait for a worker (a secret's values, a resume).
    web_writes = {(g, r, v) for g, r, v in grants["web"] if v in ("create", "patch", "delete")}
    assert web_writes == {
        ("", "secrets", "create"), ("", "secrets", "patch"), ("", "secrets", "delete"),
        ("kueue.x-k8s.io", "workloads", "patch"),
    }  # fmt: skip
    # Secrets only in the team namespaces, through the RoleBindings the portal keeps there.
    everywhere = granted_by_component(objects, team_namespaces=False)
    assert not {t for triples in everywhere.values() for t in triples if t[1] == "secrets"}
    assert team_namespace_roles(objects) == {
        "quartermaster-team-web": ["quartermaster/quartermaster-web"],
        "quartermaster-team-worker": ["quartermaster/quartermaster-worker"],
    }


def test_the_roles_name_what_they_grant_and_list_no_secret(rendered):
    _, objects = rendered
    for role in _by_kind(objects, "ClusterRole"):
        assert role["rules"]
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[field], rule
            if "secrets" in rule["resources"]:
                # Read back by name only: a list or watch would read every Secret.
                assert not {"list", "watch"} & set(rule["verbs"]), rule
            if rule["resources"] == ["clusterroles"]:
                assert rule["verbs"] == ["bind"]
                assert rule["resourceNames"] == [
                    "edit", "quartermaster-team-web", "quartermaster-team-worker"]  # fmt: skip
    # The team roles are bound by the portal in each team namespace, never cluster-wide.
    bound = {b["roleRef"]["name"] for b in _by_kind(objects, "ClusterRoleBinding")}
    assert bound == {"quartermaster-web", "quartermaster-worker"}
    for binding in _by_kind(objects, "ClusterRoleBinding"):
        assert binding["roleRef"]["name"] == binding["metadata"]["name"]
        assert binding["subjects"] == [{"kind": "ServiceAccount", "namespace": "quartermaster",
                                        "name": binding["metadata"]["name"]}]  # fmt: skip
    assert ("", "pods/log", "get") in granted() and ("", "secrets", "patch") in granted()


def test_the_admission_policy_holds_the_portals_accounts_to_its_namespaces(rendered):
    _, objects = rendered
    policy = _by_kind(objects, "ValidatingAdmissionPolicy")[0]
    binding = _by_kind(objects, "ValidatingAdmissionPolicyBinding")[0]
    assert binding["spec"] == {"policyName": policy["metadata"]["name"],
                               "validationActions": ["Deny"]}  # fmt: skip
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    condition = spec["matchConditions"][0]["expression"]
    for account in ("web", "worker"):
        assert f'"system:serviceaccount:quartermaster:quartermaster-{account}"' in condition
    rules = spec["matchConstraints"]["resourceRules"]
    assert {"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"], "scope": "Namespaced",
            "operations": ["CREATE", "UPDATE", "DELETE"]} in rules  # fmt: skip
    assert any(r["resources"] == ["namespaces"] for r in rules)
    assert all(v["reason"] == "Forbidden" for v in spec["validations"])
    variables = {v["name"]: v["expression"] for v in spec["variables"]}
    assert "'app.kubernetes.io/managed-by'" in variables["inManagedNamespace"]


def test_liveness_is_apart_from_readiness(rendered):
    _, objects = rendered
    web = _component(objects, "web")["containers"][0]
    assert web["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert web["startupProbe"]["httpGet"]["path"] == "/livez"
    assert web["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for probe in ("livenessProbe", "readinessProbe"):
        assert web[probe]["httpGet"]["httpHeaders"] == [{"name": "Host", "value": "localhost"}]
    worker = _component(objects, "worker")["containers"][0]
    assert worker["livenessProbe"]["exec"]["command"] == ["/app/scripts/serve", "probe", "alive"]
    assert worker["readinessProbe"]["exec"]["command"] == ["/app/scripts/serve", "probe", "ready"]
    beat = _component(objects, "beat")["containers"][0]
    assert beat["livenessProbe"]["exec"]["command"] == ["/app/scripts/serve", "probe", "alive"]
    assert "readinessProbe" not in beat


def test_the_migration_job_is_named_per_release_and_pods_wait_for_its_schema(rendered):
    _, objects = rendered
    job = _by_kind(objects, "Job")[0]
    # The version and the digest's start: the next release's Job is another object.
    assert re.fullmatch(r"quartermaster-migrate-1-0-0-[0-9a-f]{10}", job["metadata"]["name"])
    assert job["spec"]["template"]["spec"]["containers"][0]["args"] == ["migrate"]
    for component in ("web", "worker"):
        init = _component(objects, component)["initContainers"]
        assert [c["args"] for c in init] == [["wait-for-schema"]], component


def test_workers_finish_their_tasks_on_sigterm(rendered):
    _, objects = rendered
    worker = _component(objects, "worker")
    # Celery's warm shutdown finishes the running tasks: a batch of jobs, or a what-if replay.
    assert worker["terminationGracePeriodSeconds"] >= 120
    assert worker["containers"][0]["args"] == ["worker"]


def test_network_policies_admit_the_ingress_controller_and_name_every_destination(rendered):
    _, objects = rendered
    policies = {p["metadata"]["name"]: p["spec"] for p in _by_kind(objects, "NetworkPolicy")}
    portal = {"app.kubernetes.io/name": "quartermaster",
              "app.kubernetes.io/instance": "quartermaster"}  # fmt: skip
    deny = policies["quartermaster-deny-ingress"]
    assert deny == {"podSelector": {"matchLabels": portal}, "policyTypes": ["Ingress"]}
    web = policies["quartermaster-web-ingress"]
    assert web["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "web"
    assert web["ingress"] == [{
        "from": [{"namespaceSelector": {"matchLabels": {
            "kubernetes.io/metadata.name": "ingress-nginx"}}}],
        "ports": [{"port": "http", "protocol": "TCP"}],
    }]  # fmt: skip
    egress = policies["quartermaster-egress"]
    assert egress["podSelector"] == {"matchLabels": portal}
    ports = {p["port"] for rule in egress["egress"] for p in rule["ports"]}
    # DNS, PostgreSQL, Redis, the API server, Prometheus, the DCGM exporter, OIDC, mail.
    assert ports == {53, 5432, 6379, 443, 6443, 9090, 9400, 587}
    dns = egress["egress"][0]
    assert dns["to"][0]["podSelector"] == {"matchLabels": {"k8s-app": "kube-dns"}}


def test_beat_runs_once_and_the_sizes_follow_the_shape(rendered):
    shape, objects = rendered
    beat = _by_kind(objects, "Deployment", "quartermaster-beat")[0]["spec"]
    assert beat["replicas"] == 1 and beat["strategy"] == {"type": "Recreate"}
    web = _by_kind(objects, "Deployment", "quartermaster-web")[0]["spec"]
    hpa = _by_kind(objects, "HorizontalPodAutoscaler")[0]["spec"]
    pdb = _by_kind(objects, "PodDisruptionBudget")[0]["spec"]
    assert hpa["scaleTargetRef"]["name"] == "quartermaster-web"
    if shape == "ha":
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
    assert not SECRET_SETTINGS & set(config)
    assert settings - DEV_ONLY - set(config) == SECRET_SETTINGS
    for name, spec in _pod_specs(objects):
        for container in spec["containers"] + spec.get("initContainers", []):
            assert container["envFrom"] == [{"configMapRef": {"name": "quartermaster-config"}}]
            from_secret = {
                e["name"] for e in container["env"]
                if e["valueFrom"]["secretKeyRef"]["name"] == "quartermaster-secrets"
            }  # fmt: skip
            assert {"SECRET_KEY", "DATABASE_URL", "CELERY_BROKER_URL", "CACHE_URL"} <= from_secret
            # The web's secrets go to the web only.
            web_only = {"METRICS_TOKEN", "OIDC_CLIENT_SECRET"}
            assert (web_only <= from_secret) is (name == "quartermaster-web"), name
            assert from_secret <= SECRET_SETTINGS
    # In the cluster, the portal manages the cluster it runs in.
    assert config["KUBECONFIG"] == "" and "localhost" in config["ALLOWED_HOSTS"]


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
            assert DIGEST.match(back["spec"]["template"]["spec"]["containers"][0]["image"])
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


def test_the_recorded_requests_check_names_what_is_not_granted_and_what_is_never_used():
    """tests/rbac_record.check, as `make test` applies it to the whole suite's requests."""
    grants = {"web": {("", "pods", "get")},
              "worker": {("batch", "jobs", "create"), ("", "secrets", "delete")}}  # fmt: skip
    recorded = {"web": {("", "pods", "get"), ("", "nodes", "list")},
                "any": {("batch", "jobs", "create")}}  # fmt: skip
    assert check(recorded, grants, exact=False) == ["web: not granted: (core) nodes list"]
    # A service a test called directly (no known process) used the workers' job grant.
    assert check(recorded, grants, exact=True) == [
        "web: not granted: (core) nodes list",
        "worker: granted but never used: (core) secrets delete",
    ]
    assert check({"any": {("", "configmaps", "get")}}, grants, exact=False) == [
        "any: not granted: (core) configmaps get"
    ]
