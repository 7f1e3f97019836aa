"""The Helm chart (deploy/helm/quartermaster) with Helm built from its Go module: `helm lint`
passes for each shape, `helm template` renders valid Kubernetes for each, the kustomize manifests
of deploy/kubernetes are exactly its output (one source of truth), and its values reach the
objects: existing Secrets by reference, further clusters' kubeconfigs, a config change rolling
the pods, the migration Job named after the version."""

import shutil
import subprocess

import pytest
import yaml

from cluster import helm
from tests.deploy.k8s_schema import schema_errors

SHAPES = ["small", "ha"]


def _objects(text: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def _template(helm_binary, shape="small", **settings) -> list[dict]:
    return _objects(helm.template(shape, settings=settings, helm=helm_binary))


@pytest.mark.parametrize("shape", SHAPES)
def test_helm_lint_passes_for_each_shape(helm_binary, shape):
    out = helm.run("lint", "--strict", str(helm.CHART), "-f", str(helm.values_file(shape)),
                   helm=helm_binary)  # fmt: skip
    assert "1 chart(s) linted, 0 chart(s) failed" in out


def test_helm_lint_refuses_a_broken_chart(helm_binary, tmp_path):
    chart = tmp_path / "quartermaster"
    shutil.copytree(helm.CHART, chart)
    web = chart / "templates" / "web.yaml"
    web.write_text(web.read_text().replace("{{- include", "{{- inclde", 1))
    with pytest.raises(RuntimeError, match="inclde"):
        helm.run("lint", "--strict", str(chart), helm=helm_binary)


@pytest.mark.parametrize("shape", SHAPES)
def test_helm_template_renders_valid_kubernetes_for_each_shape(helm_binary, shape):
    objects = _template(helm_binary, shape)
    assert len(objects) >= 20
    for obj in objects:
        assert schema_errors(obj) == [], f"{obj['kind']} {obj['metadata']['name']}"


def test_the_defaults_render_valid_kubernetes_too(helm_binary):
    out = helm.run("template", "qm", str(helm.CHART), "--namespace", "gpu-portal",
                   helm=helm_binary)  # fmt: skip
    objects = _objects(out)
    for obj in objects:
        assert schema_errors(obj) == [], f"{obj['kind']} {obj['metadata']['name']}"
    names = {o["metadata"]["name"] for o in objects if o["kind"] == "ServiceAccount"}
    assert names == {f"qm-quartermaster-{c}" for c in ("web", "worker", "beat", "migrate")}
    # Without a digest, the tag (the chart's appVersion) names the image.
    images = {o["spec"]["template"]["spec"]["containers"][0]["image"]
              for o in objects if o["kind"] == "Deployment"}  # fmt: skip
    assert images == {"registry.example.org/quartermaster:1.0.0"}


@pytest.mark.parametrize("shape", SHAPES)
def test_the_kustomize_manifests_are_the_charts_output(helm_binary, shape):
    written = helm.manifest_path(shape).read_text()
    assert written == helm.rendered_text(shape, helm=helm_binary), (
        f"deploy/kubernetes/{shape} is not what the chart renders: run `make deploy-manifests`"
    )
    kubectl = shutil.which("kubectl")
    done = subprocess.run([kubectl, "kustomize", str(helm.MANIFESTS / shape)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr

    def key(o):
        return (o["kind"], o["metadata"]["name"])

    from_kustomize = sorted(_objects(done.stdout), key=key)
    assert from_kustomize == sorted(_template(helm_binary, shape), key=key)


def test_secrets_come_from_existing_secrets_by_reference(helm_binary):
    objects = _template(
        helm_binary,
        existingSecret="portal-secrets",
        **{"secretEnv.DATABASE_URL.secret": "pg-app", "secretEnv.DATABASE_URL.key": "uri"},
    )
    assert not [o for o in objects if o["kind"] == "Secret"]  # the chart creates none
    web = next(o for o in objects if o["metadata"]["name"] == "quartermaster-web"
               and o["kind"] == "Deployment")  # fmt: skip
    env = {e["name"]: e["valueFrom"]["secretKeyRef"]
           for e in web["spec"]["template"]["spec"]["containers"][0]["env"]}  # fmt: skip
    assert env["DATABASE_URL"] == {"name": "pg-app", "key": "uri", "optional": False}
    assert env["SECRET_KEY"] == {"name": "portal-secrets", "key": "SECRET_KEY", "optional": False}
    assert env["CACHE_URL"]["optional"] is True


def test_further_clusters_kubeconfigs_are_mounted_into_web_and_workers(helm_binary):
    objects = _template(helm_binary, **{"kubeconfigSecrets[0].secretName": "gpu-west"})
    for obj in objects:
        if obj["kind"] not in ("Deployment", "Job"):
            continue
        spec = obj["spec"]["template"]["spec"]
        mounts = {m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
        component = obj["metadata"]["labels"]["app.kubernetes.io/component"]
        assert ("/app/kubeconfigs/gpu-west" in mounts) is (component in ("web", "worker"))
        if component in ("web", "worker"):
            assert {"name": "kubeconfig-gpu-west", "secret": {"secretName": "gpu-west"}} in (
                spec["volumes"]
            )


def test_a_config_change_rolls_the_pods_and_a_new_version_gets_its_own_migration_job(
    helm_binary,
):
    def pod_annotations(objects):
        return {o["metadata"]["name"]: o["spec"]["template"]["metadata"]["annotations"]
                for o in objects if o["kind"] == "Deployment"}  # fmt: skip

    def job_name(objects):
        return next(o["metadata"]["name"] for o in objects if o["kind"] == "Job")

    before = _template(helm_binary)
    after = _template(helm_binary, **{"config.LOG_LEVEL": "DEBUG"})
    for name, annotations in pod_annotations(after).items():
        assert annotations["checksum/config"] != pod_annotations(before)[name]["checksum/config"]
    assert job_name(after) == job_name(before)
    upgraded = _template(helm_binary, **{"image.tag": "1.1.0"})
    assert job_name(upgraded) != job_name(before)
    assert job_name(upgraded).startswith("quartermaster-migrate-1-1-0-")


def _by_kind(objects: list[dict], kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def _pod(objects: list[dict], component: str) -> dict:
    return _by_kind(objects, "Deployment")[f"quartermaster-{component}"]["spec"]["template"]


def test_prometheus_finds_every_process_metrics_by_annotations(helm_binary):
    objects = _template(helm_binary, "small")
    ports = {"web": ("http", 8000), "worker": ("metrics", 9808), "beat": ("metrics", 9808)}
    for component, (name, number) in ports.items():
        pod = _pod(objects, component)
        assert pod["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
        assert pod["metadata"]["annotations"]["prometheus.io/port"] == str(number)
        assert pod["metadata"]["annotations"]["prometheus.io/path"] == "/metrics"
        container = pod["spec"]["containers"][0]
        assert {"name": name, "containerPort": number} in container["ports"], component
        # The token Prometheus sends, when the Secret has one, reaches each process.
        assert "METRICS_TOKEN" in {e["name"] for e in container["env"]}, component
    config = next(o for o in objects if o["kind"] == "ConfigMap")
    assert config["data"]["METRICS_PORT"] == "9808"
    assert not _by_kind(objects, "ServiceMonitor")
    # Prometheus' namespace may reach the metrics ports; nobody else is let in.
    policy = _by_kind(objects, "NetworkPolicy")["quartermaster-metrics-ingress"]
    rule = policy["spec"]["ingress"][0]
    assert rule["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    ]
    assert {p["port"] for p in rule["ports"]} == {"http", "metrics"}


def test_a_service_monitor_and_the_alert_rules_for_the_prometheus_operator(helm_binary):
    objects = _template(
        helm_binary, "ha", **{
            "metrics.scrape": "serviceMonitor", "metrics.prometheusRule.enabled": "true",
            "metrics.serviceMonitor.bearerTokenFromSecret": "true",
        }
    )  # fmt: skip
    for obj in objects:
        if obj["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # the Prometheus Operator's kinds: no schema here
        assert schema_errors(obj) == [], f"{obj['kind']} {obj['metadata']['name']}"
    assert "prometheus.io/scrape" not in _pod(objects, "worker")["metadata"]["annotations"]
    monitor = _by_kind(objects, "ServiceMonitor")["quartermaster"]
    assert [(e["port"], e["path"]) for e in monitor["spec"]["endpoints"]] == [
        ("http", "/metrics"), ("metrics", "/metrics")
    ]  # fmt: skip
    for endpoint in monitor["spec"]["endpoints"]:
        assert endpoint["authorization"]["credentials"] == {
            "name": "quartermaster-secrets", "key": "METRICS_TOKEN"
        }  # fmt: skip
    services = _by_kind(objects, "Service")
    selector = monitor["spec"]["selector"]
    for component in ("web", "worker", "beat"):
        suffix = "" if component == "web" else "-metrics"
        name = f"quartermaster-{component}{suffix}"
        labels = services[name]["metadata"]["labels"]
        assert all(labels[k] == v for k, v in selector["matchLabels"].items()), name
        assert labels["app.kubernetes.io/component"] in selector["matchExpressions"][0]["values"]
        ports = {p["name"] for p in services[name]["spec"]["ports"]}
        assert ports & {"http", "metrics"}, name
    rules = _by_kind(objects, "PrometheusRule")["quartermaster"]
    shipped = yaml.safe_load((helm.CHART / "files" / "alert-rules.yaml").read_text())
    assert rules["spec"] == shipped


def test_workers_scale_on_the_queue_depth_in_the_ha_shape(helm_binary):
    ha = _template(helm_binary, "ha")
    scaler = _by_kind(ha, "HorizontalPodAutoscaler")["quartermaster-worker"]["spec"]
    assert scaler["scaleTargetRef"]["name"] == "quartermaster-worker"
    assert (scaler["minReplicas"], scaler["maxReplicas"]) == (3, 12)
    assert scaler["metrics"] == [{"type": "External", "external": {
        "metric": {"name": "quartermaster_celery_queue_length",
                   "selector": {"matchLabels": {"queue": "quartermaster"}}},
        "target": {"type": "AverageValue", "averageValue": "20"},
    }}]  # fmt: skip
    # The autoscaler owns the workers' count: an upgrade does not reset it.
    worker = _by_kind(ha, "Deployment")["quartermaster-worker"]
    assert "replicas" not in worker["spec"]

    small = _template(helm_binary, "small")
    assert "quartermaster-worker" not in _by_kind(small, "HorizontalPodAutoscaler")
    assert _by_kind(small, "Deployment")["quartermaster-worker"]["spec"]["replicas"] == 1

    keda = _template(helm_binary, "ha", **{"worker.autoscaling.keda.enabled": "true"})
    assert "quartermaster-worker" not in _by_kind(keda, "HorizontalPodAutoscaler")
    scaled = _by_kind(keda, "ScaledObject")["quartermaster-worker"]["spec"]
    assert scaled["scaleTargetRef"] == {"name": "quartermaster-worker"}
    trigger = scaled["triggers"][0]
    assert trigger["type"] == "prometheus"
    assert trigger["metadata"]["query"] == (
        'max(quartermaster_celery_queue_length{queue="quartermaster"})'
    )
    assert trigger["metadata"]["threshold"] == "20"
