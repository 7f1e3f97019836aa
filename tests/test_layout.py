"""The dependency line the layout is built on (issue #30, DESIGN §3), read from every module's
imports with `ast` (top-level and inside functions alike): core <- fleet <- queues <- billing <-
planning, sso and demo on top; config, the composition root, imports no app; kueuemodel imports
nothing of ours; no app imports kubesim."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

# Every top-level package of ours (what an import of "ours" starts with).
OURS = {
    "config", "core", "fleet", "queues", "billing", "planning", "sso", "demo", "kubesim",
    "kueuemodel", "qm", "bench", "tests",
}  # fmt: skip
# What no app imports: the simulator, the CLI, the benchmarks and the tests (kueuemodel, a pure
# library, any app may ask).
NOT_FOR_APPS = {"kubesim", "qm", "bench", "tests"}
# package -> what no module of it may import.
FORBIDDEN = {
    "config": OURS - {"config"},
    "core": NOT_FOR_APPS | {"fleet", "queues", "billing", "planning", "sso", "demo"},
    "fleet": NOT_FOR_APPS | {"queues", "billing", "planning", "sso", "demo"},
    "queues": NOT_FOR_APPS | {"billing", "planning", "sso", "demo"},
    "billing": NOT_FOR_APPS | {"planning", "sso", "demo"},
    "planning": NOT_FOR_APPS | {"sso", "demo"},
    "sso": NOT_FOR_APPS | {"planning", "demo"},
    "demo": NOT_FOR_APPS,
    "kueuemodel": OURS - {"kueuemodel"},
}


def imported(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every import in a module, relative ones resolved against its
    package; `from x import y` counts as importing x.y (y may be a module)."""
    parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
    package = parts[:-1]  # a module's package; an __init__'s is the package itself
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            found.append((node.lineno, module))
            found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
    return found


def violations(package: str, forbidden: set[str]) -> list[str]:
    out = []
    for path in sorted((REPO_ROOT / package).rglob("*.py")):
        for line, module in imported(path):
            top = module.split(".")[0]
            if top in forbidden:
                out.append(f"{path.relative_to(REPO_ROOT)}:{line} imports {module}")
    return sorted(set(out))


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_follow_the_dependency_line(package):
    assert (REPO_ROOT / package).is_dir()
    assert violations(package, set(FORBIDDEN[package])) == []


def test_the_check_sees_imports_of_every_form(tmp_path, monkeypatch):
    """The reader finds plain, from, relative and function-level imports, so the rules above
    can fail."""
    monkeypatch.setattr("tests.test_layout.REPO_ROOT", tmp_path)
    (tmp_path / "queues" / "services").mkdir(parents=True)
    (tmp_path / "queues" / "services" / "x.py").write_text(
        "import billing.models\n"
        "from planning import tasks\n"
        "from ..selectors import jobs\n"
        "def f():\n"
        "    from kubesim.replay import ReplayJob\n"
    )
    assert violations("queues", FORBIDDEN["queues"]) == [
        "queues/services/x.py:1 imports billing.models",
        "queues/services/x.py:2 imports planning",
        "queues/services/x.py:2 imports planning.tasks",
        "queues/services/x.py:5 imports kubesim.replay",
        "queues/services/x.py:5 imports kubesim.replay.ReplayJob",
    ]
    assert (3, "queues.selectors.jobs") in imported(tmp_path / "queues/services/x.py")
