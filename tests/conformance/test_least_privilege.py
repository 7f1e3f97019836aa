"""Least privilege, proven on the real API server: the chart is installed with the Helm built
from its Go module, each process's ServiceAccount gets a token by TokenRequest (web and workers;
beat's and the migration Job's pods mount none), and the portal's real processes run as in
their pods (tests/conformance/in_pod: the in-cluster configuration with that token) through a
whole journey: the migration Job registers the cluster, the worker syncs the inventory and
reconciles pools, quotas, team namespaces and volumes, the web serves a platform admin, a
manager, a lead and a researcher through the REST API (a pool, a quota request and its
approval, a team secret written and read back, a volume, a job submitted, its events and logs,
a resume, a cancel), beat sends the periodic tasks. The API server's audit log shows every
request the portal's accounts made allowed; requests outside the grants (Secrets listed or read
in kube-system, a RoleBinding there, a Secret written where the portal manages nothing, a
namespace it did not create labelled as its own) are refused with 403."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
import requests
from django.db import connection
from kubernetes import client

from cluster import helm
from cluster.processes import Layout
from cluster.testing import wait_for
from tests.conformance import audit
from tests.processes import SERVE, serving

REPO = Path(__file__).resolve().parents[2]
IN_POD = Path(__file__).resolve().parent / "in_pod"
COMPONENTS = ("web", "worker", "beat", "migrate")
WITH_TOKEN = ("web", "worker")
KUEUE = ("kueue.x-k8s.io", "v1beta2")


@dataclass
class Release:
    """The chart installed on the real cluster: its namespace, names, the ConfigMap's data."""

    name: str
    namespace: str
    fullname: str
    config: dict

    def account(self, component: str) -> str:
        return f"{self.fullname}-{component}"

    def user(self, component: str) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.account(component)}"


@pytest.fixture(scope="module")
def release(real_cluster, kube, helm_binary):
    """The chart's small shape installed by `helm install` into a namespace of its own."""
    tag = uuid.uuid4().hex[:5]
    name, namespace = f"lp{tag}", f"qm-lp-{tag}"
    kubeconfig = ["--kubeconfig", str(real_cluster)]
    helm.run("install", name, str(helm.CHART), "--namespace", namespace, "--create-namespace",
             "-f", str(helm.values_file("small")), *kubeconfig, helm=helm_binary)  # fmt: skip
    fullname = f"{name}-quartermaster"
    config = client.CoreV1Api(kube).read_namespaced_config_map(f"{fullname}-config", namespace)
    yield Release(name, namespace, fullname, dict(config.data))
    helm.run("uninstall", name, "--namespace", namespace, *kubeconfig, helm=helm_binary)
    client.CoreV1Api(kube).delete_namespace(namespace)


@pytest.fixture(scope="module")
def accounts(kube, real_cluster, release, tmp_path_factory) -> dict[str, Path]:
    """Per process, what its pod mounts: the cluster's CA and, for web and workers, a token of
    its ServiceAccount from the TokenRequest API (beat's and migrate's pods mount none)."""
    ca = Layout(Path(real_cluster).parent).pki / "ca.crt"
    out = {}
    for component in COMPONENTS:
        directory = tmp_path_factory.mktemp(f"sa-{component}")
        shutil.copyfile(ca, directory / "ca.crt")
        if component in WITH_TOKEN:
            (directory / "token").write_text(token(kube, release, component))
        out[component] = directory
    return out


def token(kube, release: Release, component: str) -> str:
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600}}  # fmt: skip
    answer = client.CoreV1Api(kube).create_namespaced_service_account_token(
        release.account(component), release.namespace, body
    )
    return answer.status.token


@pytest.fixture
def storage_class(kube):
    """A StorageClass a team volume may name (the real cluster has none of its own)."""
    name = f"standard-{uuid.uuid4().hex[:4]}"
    api = client.StorageV1Api(kube)
    api.create_storage_class({"metadata": {"name": name}, "provisioner": "example.org/none"})
    yield name
    api.delete_storage_class(name)


def _database_url() -> str:
    db = connection.settings_dict
    return f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


def pod_env(release, account: Path, var_dir: Path, info: dict, **extra) -> dict:
    """A process's environment as its pod has it: the chart's ConfigMap, the Secret's settings,
    the API server's Service address; local paths and plain HTTP for the test. The processes
    share the embedded default's broker (a SQLite file, config/broker.py): the journey needs no
    Redis of its own, and the broker is no part of what is proven here."""
    host, port = info["server"].removeprefix("https://").rsplit(":", 1)
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env.update(release.config)
    env.update({
        "SECRET_KEY": "least-privilege-test", "DATABASE_URL": _database_url(),
        "KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port,
        "QM_TEST_SERVICE_ACCOUNT": str(account),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(IN_POD), os.environ.get("PYTHONPATH")])),
        "QM_VAR_DIR": str(var_dir), "STATIC_ROOT": str(var_dir / "static"),
        "SECURE_HTTPS": "false", "SECURE_HSTS_SECONDS": "0", "SECURE_HSTS_PRELOAD": "false",
        "TRUSTED_PROXY_COUNT": "0", "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "DCGM_SCRAPE_URLS": info["dcgm_url"], "WORKER_CONCURRENCY": "2", "WEB_WORKERS": "1",
        **extra,
    })  # fmt: skip
    return env


def running(command: str, env: dict, log: Path):
    return serving(command, env, log, stop_within=60)


class Api:
    """The portal's REST API, as one of its users."""

    def __init__(self, base: str, raw_token: str):
        self.base = base
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {raw_token}"

    def call(self, method: str, path: str, expect: int, **kwargs):
        answer = self.session.request(method, f"{self.base}/api/v1/{path}", timeout=60, **kwargs)
        assert answer.status_code == expect, f"{method} {path}: {answer.status_code} {answer.text}"
        return (
            answer.json()
            if answer.content and "json" in answer.headers["Content-Type"]
            else (answer.text)
        )


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class People:
    admin: Api
    manager: Api
    lead: Api
    member: Api


def _world(tag: str, base: str) -> tuple[People, object]:
    """A department with one team, a user of each role, the seed tiers; API tokens for all."""
    from fleet.models import GpuModel
    from queues.models import Membership
    from queues.services.tenancy import api_token_create
    from tests.factories import (
        DepartmentFactory,
        MembershipFactory,
        TeamFactory,
        UserFactory,
        manager_of,
        platform_admin,
    )
    from tests.queues.builders import make_tiers

    make_tiers()
    GpuModel.objects.get_or_create(
        name="L4", defaults={"product_labels": ["NVIDIA-L4"], "dcgm_model_names": ["NVIDIA L4"]}
    )
    department = DepartmentFactory(slug=f"lp{tag}", name=f"Least privilege {tag}")
    team = TeamFactory(slug=f"lp{tag}-vision", name=f"Vision {tag}", department=department,
                       namespace=f"qm-lp{tag}-vision")  # fmt: skip
    lead, member = UserFactory(username=f"lead-{tag}"), UserFactory(username=f"member-{tag}")
    MembershipFactory(user=lead, team=team, role=Membership.Role.LEAD)
    MembershipFactory(user=member, team=team, role=Membership.Role.MEMBER)
    users = {
        "admin": platform_admin(f"admin-{tag}"), "manager": manager_of(department, f"mgr-{tag}"),
        "lead": lead, "member": member,
    }  # fmt: skip
    apis = {role: Api(base, api_token_create(user=user, name="lp")[1]) for role, user in
            users.items()}  # fmt: skip
    return People(**apis), team


@pytest.fixture
def leftovers(kube):
    """Names (a tag) of what a journey leaves in the shared cluster: its team namespace and the
    cluster-scoped queues, cohort and flavor named after it go at the end."""
    tags: list[str] = []
    yield tags
    custom = client.CustomObjectsApi(kube)
    for plural in ("clusterqueues", "cohorts", "resourceflavors"):
        for item in custom.list_cluster_custom_object(*KUEUE, plural)["items"]:
            if any(tag in item["metadata"]["name"] for tag in tags):
                custom.delete_cluster_custom_object(*KUEUE, plural, item["metadata"]["name"])
    for ns in client.CoreV1Api(kube).list_namespace().items:
        if any(tag in ns.metadata.name for tag in tags):
            client.CoreV1Api(kube).delete_namespace(ns.metadata.name)


def _kube_object(kube, getter):
    try:
        return getter()
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise


@pytest.mark.timeout(900)
def test_every_request_of_the_portals_processes_is_allowed_through_a_whole_journey(
    transactional_db, real_cluster, real_cluster_info, kube, release, accounts, storage_class,
    leftovers, tmp_path,
):  # fmt: skip
    from fleet.models import Cluster, Node
    from queues.models import Job

    since = datetime.now(UTC)
    tag = uuid.uuid4().hex[:5]
    leftovers.append(tag)
    port = _free_port()
    info = real_cluster_info

    broker = f"sqlite:///{tmp_path / 'broker.sqlite3'}"

    def env(component, **extra):
        var_dir = tmp_path / component
        var_dir.mkdir(exist_ok=True)
        return pod_env(release, accounts[component], var_dir, info, CELERY_BROKER_URL=broker,
                       **extra)  # fmt: skip

    # The migration Job: the schema (current already), then the cluster it runs in, with no
    # token in its pod.
    done = subprocess.run([SERVE, "migrate"], cwd=REPO, env=env("migrate"), capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "registered cluster in-cluster, the one the portal runs in" in done.stdout
    cluster = Cluster.objects.get(name="in-cluster")
    assert cluster.in_cluster

    core, custom = client.CoreV1Api(kube), client.CustomObjectsApi(kube)
    with ExitStack() as stack:
        worker = stack.enter_context(running("worker", env("worker"), tmp_path / "worker.log"))
        beat = stack.enter_context(running("beat", env("beat"), tmp_path / "beat.log"))
        web = stack.enter_context(running(
            "web", env("web", WEB_BIND=f"127.0.0.1:{port}",
                       PORTAL_URL=f"http://127.0.0.1:{port}"), tmp_path / "web.log"))  # fmt: skip
        people, team = _world(tag, f"http://127.0.0.1:{port}")

        def logs() -> str:
            return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}"
                             for p in sorted(tmp_path.glob("*.log")))  # fmt: skip

        # The worker syncs the inventory the registration asked for.
        wait_for(lambda: Node.objects.filter(cluster=cluster).count() >= 12, timeout=120,
                 what=f"the inventory sync\n{logs()}")  # fmt: skip
        wait_for(lambda: _answers(port), timeout=120, what=f"the web server\n{logs()}")

        # A platform admin defines the pool; a lead asks for quota, the manager approves it.
        pool = people.admin.call("POST", "pools/", 201, json={
            "cluster": "in-cluster", "name": f"l4-{tag}", "gpu_model": "L4",
            "node_selector": {"accelerator": "nvidia-l4"},
        })  # fmt: skip
        # The admin asks for an inventory sync: the worker puts the nodes in the new pool.
        people.admin.call("POST", f"clusters/{cluster.pk}/sync/", 202)
        wait_for(lambda: Node.objects.filter(pool_id=pool["id"]).count() == 2, timeout=120,
                 what=f"the pool's nodes\n{logs()}")  # fmt: skip
        asked = people.lead.call("POST", "quota-requests/", 201, json={
            "team": team.slug, "pool": pool["id"], "nominal_gpus": 4, "justification": "train",
        })  # fmt: skip
        if asked["state"] == "pending":
            people.manager.call("POST", f"quota-requests/{asked['id']}/approve/", 200, json={})
        # The worker reconciles: the team's namespace, its guard rails and the portal's own
        # RoleBindings there, its ClusterQueue and LocalQueue.
        ns = team.namespace
        rbac = client.RbacAuthorizationV1Api(kube)
        wait_for(lambda: _kube_object(kube, lambda: rbac.read_namespaced_role_binding(
            f"qm-portal-{release.fullname}-team-web", ns)), timeout=120,
            what=f"the team namespace's RoleBindings\n{logs()}")  # fmt: skip
        assert core.read_namespace(ns).metadata.labels["app.kubernetes.io/managed-by"] == (
            "quartermaster"
        )
        wait_for(lambda: _kube_object(kube, lambda: custom.get_cluster_custom_object(
            *KUEUE, "clusterqueues", f"qm-{team.slug}")), timeout=60,
            what="the team's ClusterQueue")  # fmt: skip

        # A team secret, written by the web in the request and read back by name.
        secret = people.lead.call("POST", "secrets/", 201, json={
            "team": team.slug, "cluster": "in-cluster", "name": "wandb",
            "values": {"api-key": "s3cret"},
        })  # fmt: skip
        assert people.lead.call("GET", f"secrets/{secret['id']}/", 200)["in_cluster"] == "ok"
        assert core.read_namespaced_secret("wandb", ns).data == {"api-key": "czNjcmV0"}
        # A volume of a storage class the web checks exists; the worker creates its claim.
        people.lead.call("POST", "volumes/", 201, json={
            "team": team.slug, "cluster": "in-cluster", "name": "datasets", "size_gib": 1,
            "storage_class": storage_class,
        })  # fmt: skip
        wait_for(lambda: _kube_object(kube, lambda: core.read_namespaced_persistent_volume_claim(
            "datasets", ns)), timeout=120, what="the volume's claim")  # fmt: skip

        # A researcher's job: applied by the worker, admitted by Kueue, run on a kwok node.
        job = people.member.call("POST", "jobs/", 201, json={
            "team": team.slug, "name": "train", "image": "ghcr.io/acme/train:1.0",
            "command": ["python", "train.py"], "pool": pool["name"], "gpus_per_worker": 1,
            "max_runtime_seconds": 3600, "env": {"QM_TEST_DURATION": "300s"},
            "secret_env": {"WANDB_API_KEY": "wandb/api-key"},
        })  # fmt: skip
        wait_for(lambda: Job.objects.get(pk=job["id"]).state == "running", timeout=180,
                 what=f"the job to run\n{logs()}")  # fmt: skip
        # Its page's events and its log, read by the web.
        detail = people.member.call("GET", f"jobs/{job['id']}/", 200)
        assert detail["state"] == "running"
        # kwok keeps no container logs: its kubelet endpoint answers "no logs found" (the API
        # server authorized the request and passed it on; the audit below shows it allowed).
        log = people.member.session.get(f"http://127.0.0.1:{port}/api/v1/jobs/{job['id']}/logs/")
        assert log.status_code == 200 or "no logs found" in log.text, log.text
        # A job the idle policy suspended is resumed by its owner: the web reactivates its
        # Workload.
        Job.objects.filter(pk=job["id"]).update(idle_suspended_at=datetime.now(UTC))
        people.member.call("POST", f"jobs/{job['id']}/resume/", 200)
        # Cancelled: the worker deletes its objects.
        people.member.call("POST", f"jobs/{job['id']}/cancel/", 200)
        batch = client.BatchV1Api(kube)
        wait_for(lambda: not batch.list_namespaced_job(ns).items, timeout=120,
                 what=f"the cancelled job's objects to go\n{logs()}")  # fmt: skip
        people.lead.call("DELETE", f"secrets/{secret['id']}/", 204)
        assert _kube_object(kube, lambda: core.read_namespaced_secret("wandb", ns)) is None
        for proc in (worker, beat, web):
            assert proc.poll() is None, logs()

    requests_by = {c: [r for r in audit.read(real_cluster, since=since)
                       if r.user == release.user(c)] for c in COMPONENTS}  # fmt: skip
    print_summary(requests_by)
    for component in WITH_TOKEN:
        made = requests_by[component]
        assert made, f"{component} made no request"
        refused = [r.describe() for r in made if r.code == 403 or r.decision != "allow"]
        assert not refused, f"{component}: refused {refused}"
    # The web wrote the secret and read it back in the team namespace only; the worker applied
    # the team's objects there.
    web_made = {(r.verb, r.resource, r.namespace) for r in requests_by["web"]}
    # (A server-side apply that creates is audited as a patch.)
    assert {("patch", "secrets", ns), ("get", "secrets", ns), ("delete", "secrets", ns),
            ("get", "pods/log", ns), ("list", "events", ns),
            ("patch", "kueue.x-k8s.io/workloads", ns),
            ("list", "storage.k8s.io/storageclasses", "")} <= web_made  # fmt: skip
    worker_made = {(r.verb, r.resource) for r in requests_by["worker"]}
    assert {("patch", "namespaces"), ("patch", "rbac.authorization.k8s.io/rolebindings"),
            ("patch", "batch/jobs"), ("delete", "batch/jobs"), ("list", "nodes"),
            ("patch", "persistentvolumeclaims")} <= worker_made  # fmt: skip
    # Beat and the migration Job called nothing: no request of their accounts, none without a
    # token from the portal.
    assert requests_by["beat"] == [] and requests_by["migrate"] == []
    anonymous = [
        r.describe()
        for r in audit.read(real_cluster, since=since)
        if r.user == "system:anonymous" and r.user_agent.startswith("quartermaster")
    ]
    assert anonymous == []  # fmt: skip


def print_summary(requests_by: dict) -> None:
    """What each account asked (verb, resource, where) and how often: -s shows it."""
    for component, made in requests_by.items():
        counts: dict[tuple, int] = {}
        for r in made:
            where = "team namespace" if r.namespace.startswith("qm-lp") else (r.namespace or "-")
            key = (r.verb, r.resource, where, r.code)
            counts[key] = counts.get(key, 0) + 1
        print(f"{component}: {len(made)} requests")
        for (verb, resource, where, code), n in sorted(counts.items()):
            print(f"  {verb:7} {resource:45} {where:15} {code} x{n}")


def _answers(port: int) -> bool:
    try:
        return requests.get(f"http://127.0.0.1:{port}/livez", timeout=2).status_code == 200
    except requests.RequestException:
        return False


def _as(real_cluster_info, accounts, component):
    """A plain HTTP client of the API server with a process's token (none for beat, migrate)."""
    session = requests.Session()
    token_file = accounts[component] / "token"
    if token_file.exists():
        session.headers["Authorization"] = f"Bearer {token_file.read_text()}"
    # Per request: REQUESTS_CA_BUNDLE, where set, would win over the session's.
    ca = str(accounts[component] / "ca.crt")
    server = real_cluster_info["server"]

    def call(method, path, body=None, content_type="application/json"):
        headers = {"Content-Type": content_type} if body is not None else {}
        data = json.dumps(body) if body is not None else None
        return session.request(
            method, server + path, data=data, headers=headers, timeout=30, verify=ca
        )

    return call


SECRET = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "planted"},
          "stringData": {"token": "x"}}  # fmt: skip


def _role_binding(role: str) -> dict:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "planted"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io",
                      "name": "intruders"}],
    }  # fmt: skip


@pytest.fixture
def policy_in_force(real_cluster_info, accounts):
    """The chart's admission policy refuses the worker's writes once the API server has loaded
    it and its binding, a few seconds after `helm install` returns; until then RBAC alone
    decides. Waits for a dry run (nothing is written) that only the policy refuses."""
    worker = _as(real_cluster_info, accounts, "worker")
    probe = {"metadata": {"name": f"qm-lp-probe-{uuid.uuid4().hex[:4]}"}}

    def refused_by_policy() -> bool:
        answer = worker("POST", "/api/v1/namespaces?dryRun=All", probe)
        return answer.status_code == 403 and "ValidatingAdmissionPolicy" in answer.text

    wait_for(refused_by_policy, timeout=60, what="the chart's admission policy in force")


def test_what_the_roles_do_not_grant_the_real_api_server_refuses(
    kube, real_cluster_info, release, accounts, policy_in_force
):
    """Each request is refused with 403: by RBAC (the account holds no such grant) or by the
    admission policy (the grant stops at the namespaces the portal manages)."""
    tag = uuid.uuid4().hex[:4]
    managed, other = f"qm-lp-managed-{tag}", f"qm-lp-other-{tag}"
    core = client.CoreV1Api(kube)
    core.create_namespace({"metadata": {"name": managed, "labels": {
        "app.kubernetes.io/managed-by": "quartermaster"}}})  # fmt: skip
    core.create_namespace({"metadata": {"name": other}})
    web, worker = (_as(real_cluster_info, accounts, c) for c in WITH_TOKEN)
    rbac = "/apis/rbac.authorization.k8s.io/v1/namespaces"
    refused = {
        # Secrets: no list anywhere, no read outside the team namespaces, not even by name.
        "web lists Secrets in kube-system": web("GET", "/api/v1/namespaces/kube-system/secrets"),
        "worker lists Secrets in kube-system": worker(
            "GET", "/api/v1/namespaces/kube-system/secrets"
        ),
        "web reads a Secret of kube-system by name": web(
            "GET", "/api/v1/namespaces/kube-system/secrets/bootstrap-token-abcdef"
        ),
        "web lists every Secret": web("GET", "/api/v1/secrets"),
        "web writes a Secret in default": web(
            "POST", "/api/v1/namespaces/default/secrets", SECRET
        ),  # fmt: skip
        "worker writes a Secret in default": worker(
            "POST", "/api/v1/namespaces/default/secrets", SECRET
        ),
        # RoleBindings: only in the namespaces the portal manages, only of its roles.
        "worker binds edit in kube-system": worker(
            "POST", f"{rbac}/kube-system/rolebindings", _role_binding("edit")
        ),
        "worker binds cluster-admin in a managed namespace": worker(
            "POST", f"{rbac}/{managed}/rolebindings", _role_binding("cluster-admin")
        ),
        "web binds edit in a managed namespace": web(
            "POST", f"{rbac}/{managed}/rolebindings", _role_binding("edit")
        ),
        # Namespaces: only those it creates, labelled as its own.
        "worker labels kube-system as its own": worker(
            "PATCH",
            "/api/v1/namespaces/kube-system",
            {"metadata": {"labels": {"app.kubernetes.io/managed-by": "quartermaster"}}},
            "application/merge-patch+json",
        ),
        "worker creates an unlabelled namespace": worker(
            "POST", "/api/v1/namespaces", {"metadata": {"name": f"qm-lp-x{uuid.uuid4().hex[:4]}"}}
        ),
        "worker deletes a namespace it did not create": worker(
            "DELETE", f"/api/v1/namespaces/{other}"
        ),
        # Cluster-wide writes the portal does not make.
        "worker writes a ClusterRole": worker(
            "POST",
            "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            {"metadata": {"name": "planted"}, "rules": []},
        ),
        "web creates a namespace": web(
            "POST", "/api/v1/namespaces", {"metadata": {"name": "planted"}}
        ),  # fmt: skip
        # Beat and the migration Job have no token: anonymous, refused.
        "beat lists nodes": _as(real_cluster_info, accounts, "beat")("GET", "/api/v1/nodes"),
        "migrate lists nodes": _as(real_cluster_info, accounts, "migrate")("GET", "/api/v1/nodes"),
    }
    try:
        for what, answer in refused.items():
            print(f"{what}: {answer.status_code} {answer.json().get('message', '')[:200]}")
        wrong = {what: a.status_code for what, a in refused.items() if a.status_code != 403}
        assert not wrong, wrong
        # The admission policy, not RBAC, refuses what the roles grant outside the portal's
        # namespaces; RBAC refuses the rest.
        by_policy = "ValidatingAdmissionPolicy"
        for what in (
            "worker binds edit in kube-system",
            "worker labels kube-system as its own",
            "worker creates an unlabelled namespace",
            "worker deletes a namespace it did not create",
        ):
            assert by_policy in refused[what].json()["message"], what  # fmt: skip
        assert "cannot list resource \"secrets\"" in refused[
            "web lists Secrets in kube-system"].json()["message"]  # fmt: skip
        # What the grants do allow, in the namespace the portal manages, for contrast.
        allowed = worker("POST", f"{rbac}/{managed}/rolebindings", _role_binding("edit"))
        assert allowed.status_code == 201, allowed.text
    finally:
        core.delete_namespace(managed)
        core.delete_namespace(other)
