"""Records the (API group, resource, verb) of every request the portal's Kubernetes client
makes while the tests run, with the process that would make it in a deployment, and checks them
against that process's ServiceAccount in the deployment at the end: a request its ClusterRoles
do not grant fails the run; with QM_RBAC_EXACT=1 (`make test` of the whole suite), so does a rule
that no request of that process (nor any of no known process) used.

Which process: the innermost entry point on the call stack. A Celery task (an app's
tasks.py) runs in a worker; a view, an API view or the ASGI handler's follow in web; the
`register_cluster` command in the migration Job. A request with none of them on the stack (a
test that calls a service directly) is the portal's but of no known process: some process's
role must grant it. Requests the tests themselves make through the client (to look into
kubesim) are not the portal's and are left out.

The roles are read from the rendered deployment (deploy/kubernetes/small, the chart's output):
each ClusterRoleBinding's ServiceAccount names the process it serves, and so does each account
that KUBE_TEAM_NAMESPACE_ROLES (its ConfigMap) gives a role in every team namespace.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest
import yaml

from fleet.kube.client import REQUEST_RECORDERS, request_rbac

REPO_ROOT = Path(__file__).resolve().parents[1]
RENDERED = REPO_ROOT / "deploy" / "kubernetes" / "small" / "quartermaster.yaml"
CLIENT_DIR = str(REPO_ROOT / "fleet" / "kube") + os.sep
TESTS_DIR = str(REPO_ROOT / "tests") + os.sep
COMPONENTS = ("web", "worker", "migrate", "beat")
# No process: a service called by a test directly.
UNATTRIBUTED = "any"
# Entry points, by path inside the repository, innermost first wins.
_ENTRY_POINTS = (
    (re.compile(r"^[a-z]+/tasks\.py$"), "worker"),
    (re.compile(r"^[a-z]+/(views|api/views)/[a-z_]+\.py$|^[a-z]+/views\.py$"), "web"),
    (re.compile(r"^config/asgi_handler\.py$"), "web"),
    (re.compile(r"^fleet/management/commands/register_cluster\.py$"), "migrate"),
)
RECORDED: dict[str, set[tuple[str, str, str]]] = {}


def _component_of_caller() -> str | None:
    """The process the request belongs to, UNATTRIBUTED, or None for a test's own request."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(CLIENT_DIR):
        frame = frame.f_back
    if frame is None or frame.f_code.co_filename.startswith(TESTS_DIR):
        return None
    root = str(REPO_ROOT) + os.sep
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename.startswith(TESTS_DIR):
            break
        if filename.startswith(root):
            relative = filename[len(root) :]
            for pattern, component in _ENTRY_POINTS:
                if pattern.match(relative):
                    return component
        frame = frame.f_back
    return UNATTRIBUTED


def _record(method, path, query, content_type) -> None:
    triples = request_rbac(method, path, query, content_type)
    if not triples:
        return
    component = _component_of_caller()
    if component is not None:
        RECORDED.setdefault(component, set()).update(triples)


def rendered_objects(path: Path = RENDERED) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def component_of_account(name: str) -> str:
    """quartermaster-worker -> worker."""
    return name.rsplit("-", 1)[-1]


def _triples(role: dict) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in role.get("rules") or []
        for group in rule.get("apiGroups") or []
        for resource in rule.get("resources") or []
        for verb in rule.get("verbs") or []
    }


def team_namespace_roles(objects: list[dict]) -> dict[str, list[str]]:
    """KUBE_TEAM_NAMESPACE_ROLES of the rendered ConfigMap: role -> ["namespace/account"]."""
    for obj in objects:
        if obj["kind"] == "ConfigMap" and "KUBE_TEAM_NAMESPACE_ROLES" in (obj.get("data") or {}):
            return json.loads(obj["data"]["KUBE_TEAM_NAMESPACE_ROLES"])
    return {}


def granted_by_component(
    objects: list[dict] | None = None, *, team_namespaces: bool = True
) -> dict[str, set[tuple]]:
    """component -> the (group, resource, verb) triples its ServiceAccount's roles grant: those
    of its ClusterRoleBindings (everywhere) and, unless team_namespaces is false, those the
    portal binds it in each team namespace (resourceNames-limited rules included: the recorded
    requests name no object)."""
    objects = rendered_objects() if objects is None else objects
    roles = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ClusterRole"}
    grants: dict[str, set[tuple]] = {c: set() for c in COMPONENTS}
    for binding in (o for o in objects if o["kind"] == "ClusterRoleBinding"):
        role = roles.get(binding["roleRef"]["name"])
        for subject in binding.get("subjects") or []:
            if subject["kind"] == "ServiceAccount" and role is not None:
                component = component_of_account(subject["name"])
                grants.setdefault(component, set()).update(_triples(role))
    if team_namespaces:
        for role_name, accounts in team_namespace_roles(objects).items():
            for account in accounts:
                component = component_of_account(account.partition("/")[2])
                grants.setdefault(component, set()).update(_triples(roles[role_name]))
    return grants


def granted() -> set[tuple[str, str, str]]:
    """Every triple some process of the deployment is granted."""
    return set().union(*granted_by_component().values())


def check(recorded: dict[str, set], grants: dict[str, set], *, exact: bool) -> list[str]:
    """What is wrong, one line per triple: a request its process is not granted, a request of
    no known process that no process is granted, and (exact) a grant that no request of its
    process, nor any of no known process, used."""
    problems = []
    everything = set().union(*grants.values())
    for component, triples in sorted(recorded.items()):
        allowed = everything if component == UNATTRIBUTED else grants.get(component, set())
        for group, resource, verb in sorted(triples - allowed):
            problems.append(f"{component}: not granted: {group or '(core)'} {resource} {verb}")
    if exact:
        # A service a test calls directly is of no known process; what it asks for counts as
        # used by every process (the conformance suite's journey attributes each request).
        unattributed = recorded.get(UNATTRIBUTED, set())
        for component, allowed in sorted(grants.items()):
            unused = allowed - recorded.get(component, set()) - unattributed
            for group, resource, verb in sorted(unused):
                problems.append(
                    f"{component}: granted but never used: {group or '(core)'} {resource} {verb}"
                )
    return problems


def pytest_configure(config):
    REQUEST_RECORDERS.append(_record)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """Under pytest-xdist: what a worker process recorded joins the main process's record."""
    for component, triples in node.workeroutput.get("kube_requests", {}).items():
        RECORDED.setdefault(component, set()).update(tuple(t) for t in triples)


def pytest_sessionfinish(session, exitstatus):
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # a pytest-xdist worker: the main process checks
        workeroutput["kube_requests"] = {c: sorted(t) for c, t in RECORDED.items()}
        return
    exact = os.environ.get("QM_RBAC_EXACT") == "1" and not exitstatus
    # Nothing recorded in the whole suite is itself a finding (every rule unused), not a pass.
    if not RECORDED and not exact:
        return
    out = REPO_ROOT / "var" / "kube-requests.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({c: sorted(t) for c, t in sorted(RECORDED.items())}, indent=1))
    problems = check(RECORDED, granted_by_component(), exact=exact)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if problems and reporter is not None:
        reporter.write_line(f"The deployment's RBAC ({RENDERED.relative_to(REPO_ROOT)}):", red=True)
        for line in problems:
            reporter.write_line(f"  {line}", red=True)
    if problems:
        session.exitstatus = 1
