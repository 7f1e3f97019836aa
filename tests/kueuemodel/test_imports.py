"""kueuemodel is a pure library: it imports the standard library and itself, nothing else (no
Django, no kubernetes client, nothing of Quartermaster's)."""

import ast
import sys
from pathlib import Path

import kueuemodel

ROOT = Path(kueuemodel.__file__).parent


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_kueuemodel_imports_only_the_standard_library_and_itself():
    modules = sorted(ROOT.rglob("*.py"))
    assert len(modules) > 10
    for path in modules:
        foreign = {name for name in _imports(path)
                   if name != "kueuemodel" and name not in sys.stdlib_module_names}  # fmt: skip
        assert not foreign, f"{path.relative_to(ROOT.parent)} imports {sorted(foreign)}"
