"""The chart installed on the real control plane with the Helm built from its Go module: every
object `helm template` renders is created and accepted by the real API server (its schema, the
admission policy's CEL type-checked), the pods start on kwok nodes with a ServiceAccount token
only where the process calls the API, the migration Job runs, and an upgrade to the next version
creates that version's migration Job beside the old one instead of failing on its immutable
template; uninstalling removes what the chart made, cluster-wide objects included. And each shape's
`helm template` output passes the real API server's validation (dry-run=server, strict)."""

from __future__ import annotations

import uuid

import pytest
import yaml
from kubernetes import client
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError

from cluster import helm
from cluster.testing import wait_for

TOKEN_VOLUME = "kube-api-access-"


def _objects(text: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def _live(dynamic: DynamicClient, obj: dict):
    api = dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    try:
        return api.get(name=obj["metadata"]["name"], namespace=obj["metadata"].get("namespace"))
    except NotFoundError:
        return None


@pytest.mark.timeout(600)
def test_the_chart_installs_upgrades_and_uninstalls_on_the_real_control_plane(
    real_cluster, kube, helm_binary
):
    tag = uuid.uuid4().hex[:5]
    name, namespace = f"chart{tag}", f"qm-chart-{tag}"
    kubeconfig = ["--kubeconfig", str(real_cluster)]
    values = ["-f", str(helm.values_file("ha"))]
    dynamic = DynamicClient(kube)
    core = client.CoreV1Api(kube)
    rendered: list[dict] = []
    out = helm.run("install", name, str(helm.CHART), "--namespace", namespace,
                   "--create-namespace", *values, *kubeconfig, helm=helm_binary)  # fmt: skip
    try:
        assert "STATUS: deployed" in out
        rendered = _objects(helm.run("template", name, str(helm.CHART), "--namespace", namespace,
                                     *values, helm=helm_binary))  # fmt: skip
        assert len(rendered) >= 20
        for obj in rendered:
            live = _live(dynamic, obj)
            assert live is not None, f"{obj['kind']} {obj['metadata']['name']} was not created"
        policy = next(o for o in rendered if o["kind"] == "ValidatingAdmissionPolicy")
        checked = wait_for(
            lambda: (_live(dynamic, policy).status or {}).get("typeChecking"),
            what="the admission policy's type check",
        )
        assert not checked.get("expressionWarnings"), checked

        # The pods run (kwok); only web's and the workers' mount a token.
        selector = f"app.kubernetes.io/instance={name}"

        def pods():
            found = core.list_namespaced_pod(namespace, label_selector=selector).items
            return found if len([p for p in found if p.status.phase in (
                "Running", "Succeeded")]) >= 8 else None  # fmt: skip

        for pod in wait_for(pods, timeout=120, what="the release's pods"):
            component = pod.metadata.labels["app.kubernetes.io/component"]
            tokens = [v for v in pod.spec.volumes if v.name.startswith(TOKEN_VOLUME)]
            assert bool(tokens) is (component in ("web", "worker")), pod.metadata.name
            if component in ("web", "worker"):
                assert [c.args for c in pod.spec.init_containers] == [["wait-for-schema"]]
        jobs = client.BatchV1Api(kube)
        first = next(o["metadata"]["name"] for o in rendered if o["kind"] == "Job")
        wait_for(lambda: jobs.read_namespaced_job(first, namespace).status.succeeded,
                 timeout=120, what="the migration Job")  # fmt: skip

        # The next release: its own migration Job, the old one kept until its TTL.
        out = helm.run("upgrade", name, str(helm.CHART), "--namespace", namespace, *values,
                       "--set", "image.tag=1.1.0", *kubeconfig, helm=helm_binary)  # fmt: skip
        assert "STATUS: deployed" in out and "REVISION: 2" in out
        names = {j.metadata.name for j in jobs.list_namespaced_job(namespace).items}
        second = f"{name}-quartermaster-migrate-1-1-0-9d3b8f1c4a"
        assert second in names, names
        web = client.AppsV1Api(kube).read_namespaced_deployment(
            f"{name}-quartermaster-web", namespace
        )
        assert web.spec.template.spec.containers[0].image.startswith(
            "registry.example.org/quartermaster:1.1.0@sha256:"
        )
    finally:
        helm.run("uninstall", name, "--namespace", namespace, "--wait", *kubeconfig,
                 helm=helm_binary)  # fmt: skip
    for obj in rendered:
        if "namespace" not in obj["metadata"]:  # cluster-wide: the roles, the policy
            assert _live(dynamic, obj) is None, f"{obj['kind']} {obj['metadata']['name']} left"
    core.delete_namespace(namespace)


@pytest.mark.parametrize("shape", ["small", "ha"])
def test_each_shape_passes_the_real_api_servers_validation(real_cluster, kube, helm_binary,
                                                             shape):  # fmt: skip
    """Every object of `helm template` for the shape, created with dry-run=server: the API
    server's schema (unknown fields refused: strict field validation), defaulting and admission
    run, nothing is stored."""
    import shutil
    import subprocess

    tag = uuid.uuid4().hex[:5]
    name, namespace = f"dry{tag}", f"qm-dry-{tag}"
    core = client.CoreV1Api(kube)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    try:
        text = helm.run("template", name, str(helm.CHART), "--namespace", namespace,
                        "-f", str(helm.values_file(shape)), helm=helm_binary)  # fmt: skip
        done = subprocess.run(
            [shutil.which("kubectl"), "--kubeconfig", str(real_cluster), "create",
             "--dry-run=server", "--validate=strict", "-o", "name", "-f", "-"],
            input=text, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        created = done.stdout.split()
        assert len(created) == len(_objects(text)) >= 20, done.stdout
        # Nothing was stored.
        assert not client.AppsV1Api(kube).list_namespaced_deployment(namespace).items
        # And the server refuses a field no schema has.
        broken = text.replace("terminationGracePeriodSeconds:", "terminationGracePeriod:", 1)
        done = subprocess.run(
            [shutil.which("kubectl"), "--kubeconfig", str(real_cluster), "create",
             "--dry-run=server", "--validate=strict", "-f", "-"],
            input=broken, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode != 0 and "terminationGracePeriod" in done.stderr, done.stderr
    finally:
        core.delete_namespace(namespace)


# The operators' CRDs in their Go modules (cluster/build/monitoring), by the kinds the chart
# renders for them.
OPERATOR_CRDS = {
    "github.com/prometheus-operator/prometheus-operator": (
        "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml",
        "example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml",
    ),
    "github.com/kedacore/keda/v2": ("config/crd/bases/keda.sh_scaledobjects.yaml",),
}


@pytest.fixture
def operator_crds(kube):
    """The ServiceMonitor, PrometheusRule and ScaledObject CRDs of the Prometheus Operator and
    KEDA, from their Go modules, installed and established; removed afterwards."""
    from cluster import build
    from cluster.addons import load_all

    extensions = client.ApiextensionsV1Api(kube)
    crds = [
        crd
        for module, paths in OPERATOR_CRDS.items()
        for path in paths
        for crd in load_all(build.module_source(module, "monitoring") / path)
    ]
    for crd in crds:
        crd.get("metadata", {}).pop("annotations", None)
        extensions.create_custom_resource_definition(crd)

    def established(name: str) -> bool:
        conditions = extensions.read_custom_resource_definition(name).status.conditions or []
        return any(c.type == "Established" and c.status == "True" for c in conditions)

    def all_established():
        return all(established(crd["metadata"]["name"]) for crd in crds)

    wait_for(all_established, timeout=60, what="the operators' CRDs established")
    yield [crd["spec"]["names"]["kind"] for crd in crds]
    for crd in crds:
        extensions.delete_custom_resource_definition(crd["metadata"]["name"])


def test_what_the_chart_renders_for_the_operators_passes_their_crds_schemas(
    real_cluster, kube, helm_binary, operator_crds
):
    """With the Prometheus Operator's scrape configuration and alert rules and KEDA's
    autoscaling on, the ServiceMonitors, the PrometheusRule and the ScaledObject pass the real
    API server's validation against those operators' own CRDs (dry-run=server, strict), and a
    field their schema lacks is refused."""
    import shutil
    import subprocess

    assert sorted(operator_crds) == ["PrometheusRule", "ScaledObject", "ServiceMonitor"]
    tag = uuid.uuid4().hex[:5]
    name, namespace = f"ops{tag}", f"qm-ops-{tag}"
    core = client.CoreV1Api(kube)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))

    def create(text: str):
        return subprocess.run(
            [shutil.which("kubectl"), "--kubeconfig", str(real_cluster), "create",
             "--dry-run=server", "--validate=strict", "-o", "name", "-f", "-"],
            input=text, capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    try:
        text = helm.run(
            "template", name, str(helm.CHART), "--namespace", namespace,
            "-f", str(helm.values_file("ha")),
            "--set", "metrics.scrape=serviceMonitor",
            "--set", "metrics.serviceMonitor.bearerTokenFromSecret=true",
            "--set", "metrics.prometheusRule.enabled=true",
            "--set", "worker.autoscaling.keda.enabled=true",
            helm=helm_binary,
        )  # fmt: skip
        kinds = sorted(o["kind"] for o in _objects(text))
        for kind in ("ServiceMonitor", "PrometheusRule", "ScaledObject"):
            assert kind in kinds, kinds
        done = create(text)
        assert done.returncode == 0, done.stderr
        created = done.stdout.split()
        assert len(created) == len(kinds), done.stdout
        for kind in ("servicemonitor", "prometheusrule", "scaledobject"):
            assert any(line.startswith(f"{kind}.") for line in created), (kind, created)
        # Each schema is in force: a misspelt field of each is refused by name.
        for kind, field in (("ServiceMonitor", "endpoints"), ("PrometheusRule", "groups"),
                            ("ScaledObject", "scaleTargetRef")):  # fmt: skip
            obj = next(o for o in _objects(text) if o["kind"] == kind)
            obj["spec"][f"{field}Typo"] = obj["spec"].pop(field)
            done = create(yaml.safe_dump(obj))
            assert done.returncode != 0 and f"{field}Typo" in done.stderr, (kind, done.stderr)
    finally:
        core.delete_namespace(namespace)
