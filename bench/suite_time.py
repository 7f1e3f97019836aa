"""The test suite's time before and after, in one sitting (issue #30's target: the pytest part
of `make test` at most half of the baseline's, not one test weaker, the count not lower).

    python -m bench.suite_time [--before adb8162] [--after HEAD] [--only tests/kueuemodel]

Clones both revisions of this repository into a work folder, installs each (`make install`),
then runs, one after the other on the same machine:
1. each revision's whole suite as its own `make test` runs it (CONFORMANCE=0: the conformance
   suite is not part of the target), every test's time kept in a JUnit file;
2. the tests both revisions have under the same id, again as each revision runs its suite.
The second figure is the like-for-like one: the suite has grown since the baseline.
Prints the pytest part's time of each run (from pytest's own summary line) and the ratios.
Not part of `make bench`'s default list: it takes about 45 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BASELINE = "adb8162"  # main when issue #30 was filed
SUMMARY = re.compile(r"=+ (.*(?:passed|failed).*) in ([\d.]+)s")


def _sh(args: list[str], cwd: Path, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, check=False, text=True, **kw)


def checkout(rev: str, into: Path) -> str:
    """A clone of this repository at `rev`, installed; returns the commit's short line."""
    if not into.exists():
        _sh(["git", "clone", "-q", str(REPO), str(into)], REPO).check_returncode()
    _sh(["git", "checkout", "-q", "--detach", rev], into).check_returncode()
    print(f"installing {rev} in {into} ...", flush=True)
    _sh(["make", "install"], into, stdout=subprocess.DEVNULL).check_returncode()
    done = _sh(["git", "log", "--oneline", "-1"], into, capture_output=True)
    return done.stdout.strip()[:70]


def run_suite(where: Path, junit: Path, log: Path, pytest_args: str) -> dict:
    """One `make test CONFORMANCE=0` at `where` (its own way of running pytest): the pytest
    part's seconds and summary, from pytest's own last line."""
    env = {**os.environ, "PYTEST_ADDOPTS": f"--junitxml={junit}"}
    args = ["make", "test", "CONFORMANCE=0"] + (
        [f"PYTEST_ARGS={pytest_args}"] if pytest_args else []
    )
    with log.open("w") as out:
        code = _sh(args, where, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    found = SUMMARY.findall(log.read_text())
    summary, seconds = found[-1] if found else ("no summary (see the log)", "nan")
    return {"seconds": float(seconds), "summary": summary, "exit": code, "log": log}


def node_ids(junit: Path, root: Path) -> list[str]:
    """pytest node ids of the JUnit file's tests, resolved against the checkout's files."""
    out = []
    for case in ET.parse(junit).iter("testcase"):
        parts = (case.get("classname") or "").split(".")
        for i in range(len(parts), 0, -1):
            if (root / Path(*parts[:i])).with_suffix(".py").exists():
                out.append("::".join(["/".join(parts[:i]) + ".py", *parts[i:], case.get("name")]))
                break
    return out


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.add_argument("--before", default=BASELINE, help=f"the baseline (default {BASELINE})")
    cli.add_argument("--after", default="HEAD")
    cli.add_argument("--only", default="", help="a test path both have, to try the bench quickly")
    cli.add_argument("--workdir", help="where the clones and logs go (default: a new temporary "
                     "folder, kept)")  # fmt: skip
    args = cli.parse_args(argv)
    os.environ.setdefault("QM_SHARED_DIR", str(REPO.parent / "shared"))
    work = Path(args.workdir or tempfile.mkdtemp(prefix="qm-suite-time-"))
    work.mkdir(parents=True, exist_ok=True)
    after_rev = _sh(["git", "rev-parse", args.after], REPO, capture_output=True).stdout.strip()
    sides = {"before": args.before, "after": after_rev}
    lines = {name: checkout(rev, work / name) for name, rev in sides.items()}
    load = os.getloadavg()[0]
    runs: dict[str, dict] = {}
    for name in sides:
        print(f"whole suite at {lines[name]} ...", flush=True)
        runs[name] = run_suite(work / name, work / f"{name}.xml", work / f"{name}.log", args.only)
    before_ids = node_ids(work / "before.xml", work / "before")
    after_ids = set(node_ids(work / "after.xml", work / "after"))
    common = [t for t in before_ids if t in after_ids]
    (work / "common.txt").write_text("\n".join(common) + "\n")
    same: dict[str, dict] = {}
    for name in sides:
        print(f"the {len(common)} tests both have, at {lines[name]} ...", flush=True)
        same[name] = run_suite(work / name, work / f"{name}-same.xml", work / f"{name}-same.log",
                               f"@{work / 'common.txt'}")  # fmt: skip

    print(f"\nsuite time, one sitting (load at start {load:.2f}; logs in {work})")
    for name in sides:
        print(f"  {name:6} {lines[name]}")
    rows = [("whole suite", runs), (f"the {len(common)} tests both have", same)]
    for label, got in rows:
        b, a = got["before"], got["after"]
        print(f"  {label}: {b['summary']} in {b['seconds']:.0f} s -> {a['summary']} in "
              f"{a['seconds']:.0f} s: {a['seconds'] / b['seconds']:.2f}x the baseline's time "
              f"(target <= 0.50x)")  # fmt: skip
        for name, run in got.items():
            if run["exit"] != 0:
                print(f"    ({name} exited {run['exit']}: see {run['log']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
