"""The shape of the code: its largest modules and largest functions (issue #30).

Run by hand (not a benchmark of speed, not run by `make bench`):
    python -m bench.code_shape                 # the 15 largest of each, tests left out
    python -m bench.code_shape --top 25 --tests
    python -m bench.code_shape --under queues billing   # only these folders

Reads every tracked Python file (`git ls-files`, so nothing in .venv or var/) with `ast`,
migrations left out (generated). A module's size is its lines; a function's size is the lines
from its `def` (decorators included) to its last statement, nested functions counted inside
their parent and listed on their own as well, methods named `Class.method`.
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Sized:
    name: str
    lines: int


def python_files(include_tests: bool, under: list[str]) -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    paths = []
    for name in listed:
        parts = Path(name).parts
        if "migrations" in parts:
            continue
        if not include_tests and parts[0] == "tests":
            continue
        if under and parts[0] not in under:
            continue
        if (ROOT / name).is_file():
            paths.append(Path(name))
    return paths


def functions(tree: ast.AST, module: str) -> list[Sized]:
    found: list[Sized] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                name = f"{prefix}{child.name}"
                found.append(Sized(f"{module}:{name}", child.end_lineno - first + 1))
                visit(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


def measure(include_tests: bool, under: list[str]) -> tuple[list[Sized], list[Sized], int]:
    modules: list[Sized] = []
    funcs: list[Sized] = []
    total = 0
    for path in python_files(include_tests, under):
        source = (ROOT / path).read_text()
        lines = source.count("\n") + (0 if source.endswith("\n") or not source else 1)
        total += lines
        modules.append(Sized(str(path), lines))
        funcs.extend(functions(ast.parse(source, filename=str(path)), str(path)))
    by_size = lambda item: (-item.lines, item.name)  # noqa: E731
    return sorted(modules, key=by_size), sorted(funcs, key=by_size), total


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=15, help="how many of each (default 15)")
    parser.add_argument("--tests", action="store_true", help="count tests/ too")
    parser.add_argument("--under", nargs="*", default=[], help="only these top-level folders")
    args = parser.parse_args(argv)
    modules, funcs, total = measure(args.tests, args.under)
    print(f"{len(modules)} modules, {total:,} lines ({'with' if args.tests else 'without'} tests)")
    print("\nlargest modules (lines):")
    for item in modules[: args.top]:
        print(f"  {item.lines:6,}  {item.name}")
    print("\nlargest functions (lines):")
    for item in funcs[: args.top]:
        print(f"  {item.lines:6,}  {item.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
