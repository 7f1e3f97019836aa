"""Helm, built from its Go module (cluster/build/helm), and the portal's chart rendered by it.

The chart (deploy/helm/quartermaster) is the one source of the deployment. The plain manifests
of deploy/kubernetes/<shape>/ (for `kubectl apply -k`) are its `helm template` output for each
shape's values file, written by `python -m cluster.helm render` (`make deploy-manifests`); the
tests check that they are what the chart renders.

    python -m cluster.helm render    # build Helm if missing, write deploy/kubernetes/*/
    python -m cluster.helm check     # exit 1 when a written shape differs from the chart's
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from cluster import build

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "deploy" / "helm" / "quartermaster"
MANIFESTS = REPO / "deploy" / "kubernetes"
SHAPES = ("small", "ha")
RELEASE = "quartermaster"
NAMESPACE = "quartermaster"
HEADER = (
    "# Generated from the chart deploy/helm/quartermaster with values-{shape}.yaml by\n"
    "# `make deploy-manifests` (python -m cluster.helm render): edit the chart, not this file.\n"
    "# helm template {release} deploy/helm/quartermaster --namespace {namespace} "
    "-f deploy/helm/quartermaster/values-{shape}.yaml\n"
)


def binary(*, log=print) -> Path:
    """The helm binary, built (once, cached outside the checkout) when missing; needs Go."""
    return build.build(["helm"], log=log)["helm"]


def run(*args: str, helm: Path | None = None, timeout: float = 300, **kwargs) -> str:
    """Run helm; its standard output, or RuntimeError with what it said."""
    done = subprocess.run(
        [str(helm or binary()), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        **kwargs,
    )
    if done.returncode != 0:
        said = "\n".join(t.strip() for t in (done.stdout, done.stderr) if t.strip())
        raise RuntimeError(f"helm {' '.join(args)}: {said}")
    return done.stdout


def values_file(shape: str) -> Path:
    return CHART / f"values-{shape}.yaml"


def template(
    shape: str,
    *,
    release: str = RELEASE,
    namespace: str = NAMESPACE,
    settings: dict[str, str] | None = None,
    helm: Path | None = None,
) -> str:
    """The chart rendered for a shape, as `helm template` prints it."""
    args = ["template", release, str(CHART), "--namespace", namespace]
    args += ["-f", str(values_file(shape))]
    for key, value in (settings or {}).items():
        args += ["--set", f"{key}={value}"]
    return run(*args, helm=helm)


def rendered_text(shape: str, *, helm: Path | None = None) -> str:
    """What deploy/kubernetes/<shape>/quartermaster.yaml holds."""
    header = HEADER.format(shape=shape, release=RELEASE, namespace=NAMESPACE)
    return header + template(shape, helm=helm)


def manifest_path(shape: str) -> Path:
    return MANIFESTS / shape / "quartermaster.yaml"


def render(*, helm: Path | None = None) -> list[Path]:
    """Write every shape's manifests; returns the files written."""
    written = []
    for shape in SHAPES:
        path = manifest_path(shape)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(rendered_text(shape, helm=helm))
        written.append(path)
    return written


def stale(*, helm: Path | None = None) -> list[str]:
    """The shapes whose written manifests are not what the chart renders."""
    return [
        shape
        for shape in SHAPES
        if not manifest_path(shape).is_file()
        or manifest_path(shape).read_text() != rendered_text(shape, helm=helm)
    ]


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "render"
    if command == "render":
        for path in render():
            print(f"wrote {path.relative_to(REPO)}")
        return 0
    if command == "check":
        behind = stale()
        for shape in behind:
            print(f"{manifest_path(shape).relative_to(REPO)} differs from the chart's output")
        return 1 if behind else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
