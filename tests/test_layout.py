"""The dependency line the layout is built on (issue #30, DESIGN §3), read from every module's
imports with `ast` (top-level and inside functions alike): core <- fleet <- queues <- billing <-
planning, sso and demo on top; config, the composition root, imports no app; kueuemodel imports
nothing of ours; no app imports kubesim. And the README's map of the tree matches the tree."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

# Every top-level package of ours (what an import of "ours" starts with).
OURS = {
    "config", "core", "fleet", "queues", "billing", "planning", "sso", "demo", "kubesim",
    "kueuemodel", "qm", "bench", "tests", "cluster",
}  # fmt: skip
# What no app imports: the simulator, the CLI, the benchmarks, the tests and the tests' real
# control plane (kueuemodel, a pure library, any app may ask).
NOT_FOR_APPS = {"kubesim", "qm", "bench", "tests", "cluster"}
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


def readme_tree(readme: str) -> dict[str, str]:
    """The README's map of the tree: top-level folder -> what it says of it."""
    block = readme.split("The tree.", 1)[1].split("```", 2)[1]
    entries: dict[str, str] = {}
    folder = None
    for line in block.splitlines():
        named = re.match(r"^([a-z_]+)/\s+(.*)$", line)
        if named:
            folder = named.group(1)
            entries[folder] = named.group(2)
        elif folder and line.strip():
            entries[folder] += " " + line.strip()
    return entries


def map_mismatches(readme: str, tracked: list[str]) -> list[str]:
    """Where the README's map and the tracked files differ: a folder one has and the other not,
    or a file or folder the map names in a folder (not a `quoted` one: those name other apps'
    files) that is not there."""
    folders = {f.split("/")[0] for f in tracked if "/" in f and not f.startswith(".")}
    entries = readme_tree(readme)
    out = [f"{f}/ is not in the map" for f in sorted(folders - set(entries))]
    out += [f"{f}/ is in the map, not in the tree" for f in sorted(set(entries) - folders)]
    for folder, text in entries.items():
        inside = ["/" + f[len(folder) + 1 :] for f in tracked if f.startswith(folder + "/")]
        for name in re.findall(
            r"(?<![\w./-])(\w+(?:/\w+)*(?:\.py|/))", re.sub(r"`[^`]*`", "", text)
        ):
            name = name.removeprefix(folder + "/")
            if not any(f"/{name}" in path for path in inside):
                out.append(f"{folder}/{name} is in the map, not in the tree")
    return out


def test_the_readmes_map_of_the_tree_matches_the_tree():
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    readme = (REPO_ROOT / "README.md").read_text()
    assert map_mismatches(readme, tracked) == []
    # The check sees a file the map names wrongly, a folder it leaves out and one it invents.
    assert "wsgi.py, asgi.py" in readme and "\nsso/  " in readme
    wrong = readme.replace("wsgi.py", "wsgl.py").replace("\nsso/  ", "\nsss/  ")
    found = map_mismatches(wrong, tracked)
    assert found[:2] == ["sso/ is not in the map", "sss/ is in the map, not in the tree"]
    assert "config/wsgl.py is in the map, not in the tree" in found
    assert all(f.startswith(("sss/", "config/wsgl")) for f in found[2:])
