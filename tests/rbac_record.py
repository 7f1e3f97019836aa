"""Records the (API group, resource, verb) of every request the portal's Kubernetes client
makes while the tests run, and checks them against the deployment's ClusterRole at the end:
a request the role does not grant fails the run; with QM_RBAC_EXACT=1 (`make test`, the whole
suite), so does a rule that no request used. Requests the tests themselves make through the
client (to look into kubesim) are not the portal's and are left out."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml

from fleet.kube.client import REQUEST_RECORDERS, request_rbac

REPO_ROOT = Path(__file__).resolve().parents[1]
ROLE_FILE = REPO_ROOT / "deploy" / "kubernetes" / "base" / "rbac.yaml"
CLIENT_DIR = str(REPO_ROOT / "fleet" / "kube") + os.sep
TESTS_DIR = str(REPO_ROOT / "tests") + os.sep
RECORDED: set[tuple[str, str, str]] = set()


def _caller_is_a_test() -> bool:
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(CLIENT_DIR):
        frame = frame.f_back
    return frame is not None and frame.f_code.co_filename.startswith(TESTS_DIR)


def _record(method, path, query, content_type) -> None:
    triples = request_rbac(method, path, query, content_type)
    if triples and not _caller_is_a_test():
        RECORDED.update(triples)


def granted() -> set[tuple[str, str, str]]:
    """The triples the ClusterRole in deploy/kubernetes grants."""
    role = next(d for d in yaml.safe_load_all(ROLE_FILE.read_text()) if d["kind"] == "ClusterRole")
    return {
        (group, resource, verb)
        for rule in role.get("rules") or []
        for group in rule.get("apiGroups") or []
        for resource in rule.get("resources") or []
        for verb in rule.get("verbs") or []
    }


def pytest_configure(config):
    REQUEST_RECORDERS.append(_record)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """Under pytest-xdist: what a worker process recorded joins the main process's record."""
    RECORDED.update(tuple(triple) for triple in node.workeroutput.get("kube_requests", []))


def pytest_sessionfinish(session, exitstatus):
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # a pytest-xdist worker: the main process checks
        workeroutput["kube_requests"] = sorted(RECORDED)
        return
    exact = os.environ.get("QM_RBAC_EXACT") == "1"
    # Nothing recorded in the whole suite is itself a finding (every rule unused), not a pass.
    if not RECORDED and not exact:
        return
    out = REPO_ROOT / "var" / "kube-requests.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(sorted(RECORDED), indent=1))
    allowed = granted()
    missing = RECORDED - allowed
    unused = allowed - RECORDED if exact and not exitstatus else set()
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    for title, triples in (("not granted", missing), ("granted but never used", unused)):
        if triples and reporter is not None:
            reporter.write_line(
                f"ClusterRole quartermaster: {title} (deploy/kubernetes/base/rbac.yaml):", red=True
            )
            for group, resource, verb in sorted(triples):
                reporter.write_line(f"  {group or '(core)'} {resource} {verb}", red=True)
    if missing or unused:
        session.exitstatus = 1
