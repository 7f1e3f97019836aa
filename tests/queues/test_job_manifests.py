"""Job renderers: Kueue Job and Service against the Kubernetes models, vcjob against its CRD."""

import json
import os
import re
from pathlib import Path

import jsonschema
import pytest
import yaml
from kubernetes.client import models as k8s_models

from fleet.models import Cluster, GpuModel, NodePool
from queues.backends import backend_named
from queues.manifests import jobs as jm
from queues.manifests import quotas as manifests
from queues.models import Department, Job, PriorityTier, Team
from tests.crd_validation import SAFE_LOADER, manifest_errors

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED_DIR = Path(os.environ.get("QM_SHARED_DIR", REPO_ROOT.parent / "shared"))
VCJOB_CRD = SHARED_DIR / "crds" / "volcano" / "batch.volcano.sh_jobs.yaml"


def _crd_schema(path: Path, version: str) -> dict:
    crd = yaml.load(path.read_text(), Loader=SAFE_LOADER)
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            return v["schema"]["openAPIV3Schema"]
    raise AssertionError(f"{path} serves no {version}")


def unknown_fields_in_schema(obj, schema: dict, path: str = "") -> list[str]:
    """Paths of fields the OpenAPI schema does not define (the API server would prune them)."""
    found = []
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return found
    if isinstance(obj, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, value in obj.items():
            child = f"{path}.{key}" if path else key
            if props is not None and key in props:
                found += unknown_fields_in_schema(value, props[key], child)
            elif isinstance(extra, dict):
                found += unknown_fields_in_schema(value, extra, child)
            elif props is not None or extra is False:
                found.append(child)
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(obj):
            found += unknown_fields_in_schema(item, schema["items"], f"{path}[{i}]")
    return found


_LIST_RE = re.compile(r"^[Ll]ist\[(.+)\]$")
_DICT_RE = re.compile(r"^(?:dict\((\w+), (.+)\)|Dict\[(\w+), (.+)\])$")
_PRIMITIVES = {"str": str, "int": int, "bool": bool, "float": (int, float), "datetime": str}


def unknown_fields_in_model(obj, type_name: str, path: str = "") -> list[str]:
    """Unknown or mistyped fields against the official client's model of a built-in kind."""
    if m := _LIST_RE.match(type_name):
        if not isinstance(obj, list):
            return [f"{path} (not a list)"]
        return [
            e
            for i, item in enumerate(obj)
            for e in unknown_fields_in_model(item, m[1], f"{path}[{i}]")
        ]
    if m := _DICT_RE.match(type_name):
        if not isinstance(obj, dict):
            return [f"{path} (not a map)"]
        value_type = m[2] or m[4]
        return [
            e for k, v in obj.items() for e in unknown_fields_in_model(v, value_type, f"{path}.{k}")
        ]
    if type_name in _PRIMITIVES:
        ok = isinstance(obj, _PRIMITIVES[type_name]) and not (
            type_name == "int" and isinstance(obj, bool)
        )
        return [] if ok else [f"{path} (not {type_name})"]
    if type_name == "object":
        return []
    model = getattr(k8s_models, type_name)
    if not isinstance(obj, dict):
        return [f"{path} (not an object)"]
    by_json = {json_key: attr for attr, json_key in model.attribute_map.items()}
    found = []
    for key, value in obj.items():
        child = f"{path}.{key}" if path else key
        if key not in by_json:
            found.append(child)
        else:
            found += unknown_fields_in_model(value, model.openapi_types[by_json[key]], child)
    return found


@pytest.fixture
def job():
    """An unsaved job with related rows built in memory (renderers are pure)."""
    dept = Department(id=1, slug="research", name="Research")
    team = Team(id=7, slug="vision", name="Vision", namespace="team-vision", department=dept)
    cluster = Cluster(id=1, name="sim", kubeconfig_path="x")
    pool = NodePool(
        id=3,
        cluster=cluster,
        name="a100",
        gpu_model=GpuModel(id=1, name="A100"),
        node_selector={"accelerator": "nvidia-a100-80gb"},
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    )
    tier = PriorityTier(id=2, name="experiment", value=100)
    return Job(
        id=42,
        team=team,
        pool=pool,
        tier=tier,
        name="Train ResNet: v2 'quoted' {x}",
        k8s_name=jm.job_k8s_name(name="Train ResNet: v2 'quoted' {x}", job_id=42),
        image="ghcr.io/acme/train:1.2",
        command=["torchrun", "train.py"],
        args=["--epochs", "3; rm -rf /"],
        env={"LR": "0.1", "NOTE": "a: b\n- c"},
        workers=1,
        gpus_per_worker=4,
        gang=True,
        max_runtime_seconds=3600,
        expected_runtime_seconds=1200,
    )


def test_name_is_dns1123_and_deterministic():
    name = jm.job_k8s_name(name="Train ResNet: v2 'quoted' {x}" * 5, job_id=123456)
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name)
    assert len(name) <= jm.NAME_MAX and name.endswith("-123456")
    assert name == jm.job_k8s_name(name="Train ResNet: v2 'quoted' {x}" * 5, job_id=123456)
    assert jm.job_k8s_name(name="!!!", job_id=5) == "x-5"


def test_single_worker_kueue_job(job):
    (obj,) = backend_named("kueue").job_objects(job)
    assert unknown_fields_in_model(obj, "V1Job") == []
    meta, spec = obj["metadata"], obj["spec"]
    assert meta["name"] == job.k8s_name and meta["namespace"] == "team-vision"
    assert meta["labels"] == {
        "app.kubernetes.io/managed-by": "quartermaster",
        "quartermaster.dev/team": "vision",
        "quartermaster.dev/job-id": "42",
        "kueue.x-k8s.io/queue-name": manifests.local_queue_name(job.team),
        "kueue.x-k8s.io/priority-class": "experiment",
    }
    assert spec["suspend"] is True
    assert spec["activeDeadlineSeconds"] == 3600
    assert "completionMode" not in spec
    pod = spec["template"]
    assert pod["metadata"]["annotations"]["quartermaster.dev/expected-runtime-seconds"] == "1200"
    assert pod["metadata"]["labels"]["quartermaster.dev/job-id"] == "42"
    assert pod["spec"]["nodeSelector"] == {"accelerator": "nvidia-a100-80gb"}
    assert pod["spec"]["tolerations"][0]["key"] == "nvidia.com/gpu"
    (container,) = pod["spec"]["containers"]
    assert container["resources"] == {"limits": {"nvidia.com/gpu": "4"}}
    # User input stays data: the odd characters survive a JSON round trip unchanged.
    assert container["args"] == ["--epochs", "3; rm -rf /"]
    assert {"name": "NOTE", "value": "a: b\n- c"} in container["env"]
    assert json.loads(json.dumps(obj)) == obj


def test_any_pool_has_no_placement(job):
    job.pool = None
    (obj,) = backend_named("kueue").job_objects(job)
    assert "nodeSelector" not in obj["spec"]["template"]["spec"]
    assert "tolerations" not in obj["spec"]["template"]["spec"]


def test_multi_worker_kueue_job_is_indexed_with_headless_service(job):
    job.workers = 3
    service, obj = backend_named("kueue").job_objects(job)
    assert unknown_fields_in_model(service, "V1Service") == []
    assert unknown_fields_in_model(obj, "V1Job") == []
    name = job.k8s_name
    assert service["metadata"]["name"] == name
    assert service["spec"]["clusterIP"] == "None"
    pod_labels = obj["spec"]["template"]["metadata"]["labels"]
    assert all(pod_labels[k] == v for k, v in service["spec"]["selector"].items())
    spec = obj["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["parallelism"] == spec["completions"] == 3
    assert spec["template"]["spec"]["subdomain"] == name
    env = {e["name"]: e for e in spec["template"]["spec"]["containers"][0]["env"]}
    assert env["MASTER_ADDR"]["value"] == f"{name}-0.{name}"
    assert env["WORLD_SIZE"]["value"] == env["NNODES"]["value"] == "3"
    assert env["NPROC_PER_NODE"]["value"] == "4"
    assert env["NODE_RANK"]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    )
    assert env["LR"]["value"] == "0.1"


def test_zero_gpu_job_has_no_gpu_limit(job):
    job.gpus_per_worker = 0
    (obj,) = backend_named("kueue").job_objects(job)
    assert "resources" not in obj["spec"]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize("gang,workers,min_available", [(True, 4, 4), (False, 4, 1), (True, 1, 1)])
def test_volcano_job_validates_against_crd(job, gang, workers, min_available):
    job.gang, job.workers = gang, workers
    (obj,) = backend_named("volcano").job_objects(job)
    schema = _crd_schema(VCJOB_CRD, "v1alpha1")
    jsonschema.validate(obj, schema)
    assert unknown_fields_in_schema(obj, schema) == []
    assert manifest_errors(obj) == []  # the governance suite's strict validator agrees
    spec = obj["spec"]
    assert spec["schedulerName"] == "volcano"
    # The leaf Queue of the job's pool under the team's, as the quota renderer names it.
    assert spec["queue"] == manifests.volcano_pool_queue_name(job.team, job.pool)
    assert spec["queue"].startswith("qm-vision-a100-")
    assert spec["minAvailable"] == min_available
    assert spec["priorityClassName"] == "experiment"
    assert spec["plugins"] == {"svc": [], "env": []}
    assert {"event": "PodEvicted", "action": "RestartJob"} in spec["policies"]
    (task,) = spec["tasks"]
    assert task["replicas"] == workers
    assert obj["metadata"]["labels"]["quartermaster.dev/job-id"] == "42"
    assert unknown_fields_in_model(task["template"], "V1PodTemplateSpec") == []


def test_unknown_field_checks_catch_mistakes(job):
    (obj,) = backend_named("volcano").job_objects(job)
    obj["spec"]["minAvailabel"] = 1
    schema = _crd_schema(VCJOB_CRD, "v1alpha1")
    assert unknown_fields_in_schema(obj, schema) == ["spec.minAvailabel"]
    (kjob,) = backend_named("kueue").job_objects(job)
    kjob["spec"]["template"]["spec"]["containers"][0]["gpus"] = 1
    assert unknown_fields_in_model(kjob, "V1Job") == ["spec.template.spec.containers[0].gpus"]
