"""Build the real control plane's binaries from the Go modules under cluster/build/.

Each module pins its versions (go.mod, go.sum). A module's binaries are built once into a
cache outside the checkout, keyed by a hash of everything that shapes them (go.mod, go.sum,
our own Go files, the build flags, the Go version), so that a fresh clone on the same machine
reuses them; cluster/bin/ (ignored by git) links to them. Only what is missing is built.

Standard library only: `make cluster` runs before any virtualenv exists.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent
MODULES_DIR = ROOT / "build"
BIN_LINKS = ROOT / "bin"


@dataclass(frozen=True)
class Binary:
    """One binary: its name and the Go package (in its module) that is its main."""

    name: str
    package: str


@dataclass(frozen=True)
class Module:
    """One of our Go modules and the binaries built from it."""

    directory: str
    binaries: tuple[Binary, ...]
    # -X flags as (Go variable, value): a literal, or "{module}" for the version go.mod pins
    # for that module, "{module:major}" / "{module:minor}" for a part of it.
    version_flags: tuple[tuple[str, str], ...] = field(default=())


def _k8s_version_flags() -> tuple[tuple[str, str], ...]:
    # What hack/lib/version.sh sets, so the components report their real version (and so the
    # API server's emulation version and feature gates are those of the release).
    out = []
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        out += [
            (f"{pkg}.gitVersion", "{k8s.io/kubernetes}"),
            (f"{pkg}.gitMajor", "{k8s.io/kubernetes:major}"),
            (f"{pkg}.gitMinor", "{k8s.io/kubernetes:minor}"),
            (f"{pkg}.gitTreeState", "clean"),
        ]
    return tuple(out)


MODULES = (
    # Kubernetes, etcd, Kueue, JobSet and kwok share one module: their k8s.io/* libraries are
    # of one minor (1.36), so every shared package is compiled once.
    Module(
        "k8s",
        (
            Binary("etcd", "./etcd"),
            Binary("kube-apiserver", "k8s.io/kubernetes/cmd/kube-apiserver"),
            Binary("kube-controller-manager", "k8s.io/kubernetes/cmd/kube-controller-manager"),
            Binary("kube-scheduler", "k8s.io/kubernetes/cmd/kube-scheduler"),
            Binary("kueue", "sigs.k8s.io/kueue/cmd/kueue"),
            Binary("jobset", "sigs.k8s.io/jobset"),
            Binary("kwok", "sigs.k8s.io/kwok/cmd/kwok"),
        ),
        _k8s_version_flags()
        + (
            ("sigs.k8s.io/kueue/pkg/version.GitVersion", "{sigs.k8s.io/kueue}"),
            ("sigs.k8s.io/jobset/pkg/version.GitVersion", "{sigs.k8s.io/jobset}"),
            # Kueue reads its visibility server's certificate from this directory, /visibility
            # upstream (a volume of its Deployment); relative here, to its working directory.
            ("sigs.k8s.io/kueue/pkg/visibility.certDir", "visibility"),
        ),
    ),
    # The training operator's v1 line is built against Kubernetes 1.31 libraries.
    Module("training-operator", (Binary("training-operator", "."),)),
)

LDFLAGS_BASE = "-s -w"


def go_env() -> dict[str, str]:
    """The environment of every go command: no cgo (static binaries), no toolchain switch."""
    env = dict(os.environ)
    env.setdefault("CGO_ENABLED", "0")
    env["GOTOOLCHAIN"] = "local"
    flags = env.get("GOFLAGS", "")
    if "-buildvcs" not in flags:
        env["GOFLAGS"] = f"{flags} -buildvcs=false".strip()
    return env


def go_version() -> str:
    out = subprocess.run(
        ["go", "env", "GOVERSION", "GOOS", "GOARCH", "CGO_ENABLED"],
        env=go_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    return " ".join(out.stdout.split())


def required_versions(module_dir: Path) -> dict[str, str]:
    """module path -> version, as go.mod requires (and replaces) them."""
    text = (module_dir / "go.mod").read_text(encoding="utf-8")
    versions: dict[str, str] = {}
    for match in re.finditer(r"^\s*(?:require\s+)?([\w./~-]+)\s+(v[\w.+-]+)", text, re.M):
        versions.setdefault(match.group(1), match.group(2))
    for match in re.finditer(r"^\s*([\w./-]+)\s+=>\s+([\w./-]+)\s+(v[\w.+-]+)", text, re.M):
        versions[match.group(1)] = match.group(3)
    return versions


def ldflags(module: Module, module_dir: Path) -> str:
    versions = required_versions(module_dir)
    parts = [LDFLAGS_BASE]
    for variable, template in module.version_flags:

        def fill(match: re.Match) -> str:
            name, _, part = match.group(1).partition(":")
            version = versions[name]
            if not part:
                return version
            major, minor = version.lstrip("v").split(".")[:2]
            return {"major": major, "minor": minor}[part]

        parts.append(f"-X {variable}={re.sub(r'{([^}]+)}', fill, template)}")
    return " ".join(parts)


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "quartermaster" / "cluster"


def module_key(module: Module, module_dir: Path, flags: str, goversion: str) -> str:
    """Hash of what shapes a module's binaries."""
    digest = hashlib.sha256()
    digest.update(f"{goversion}\n{flags}\n".encode())
    for path in sorted(module_dir.rglob("*")):
        if path.is_file() and (path.suffix == ".go" or path.name in ("go.mod", "go.sum")):
            digest.update(str(path.relative_to(module_dir)).encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def module_bin_dir(module: Module, goversion: str | None = None) -> Path:
    module_dir = MODULES_DIR / module.directory
    flags = ldflags(module, module_dir)
    key = module_key(module, module_dir, flags, goversion or go_version())
    return cache_root() / f"{module.directory}-{key}" / "bin"


def build(names: list[str] | None = None, *, log=print) -> dict[str, Path]:
    """Build what is missing (all binaries, or those named) and return name -> path."""
    goversion = go_version()
    paths: dict[str, Path] = {}
    BIN_LINKS.mkdir(exist_ok=True)
    for module in MODULES:
        wanted = [b for b in module.binaries if names is None or b.name in names]
        if not wanted:
            continue
        module_dir = MODULES_DIR / module.directory
        bin_dir = module_bin_dir(module, goversion)
        missing = [b for b in wanted if not (bin_dir / b.name).is_file()]
        if missing:
            _go_build(module, module_dir, bin_dir, missing, log)
        for binary in wanted:
            target = bin_dir / binary.name
            paths[binary.name] = target
            link = BIN_LINKS / binary.name
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(target)
    return paths


def missing() -> list[str]:
    """The binaries not built yet for the current go.mod/go.sum/flags."""
    goversion = go_version()
    return [
        binary.name
        for module in MODULES
        for binary in module.binaries
        if not (module_bin_dir(module, goversion) / binary.name).is_file()
    ]


def _go_build(module: Module, module_dir: Path, bin_dir: Path, missing, log) -> None:
    flags = ldflags(module, module_dir)
    bin_dir.mkdir(parents=True, exist_ok=True)
    names = ", ".join(b.name for b in missing)
    log(f"building {names} (module cluster/build/{module.directory}) into {bin_dir}")
    started = time.monotonic()
    # Into a temporary directory first, so that an interrupted build leaves no half binary.
    with tempfile.TemporaryDirectory(dir=bin_dir.parent) as tmp:
        cmd = ["go", "build", "-trimpath", "-ldflags", flags, "-o", tmp + os.sep]
        cmd += [b.package for b in missing]
        subprocess.run(cmd, cwd=module_dir, env=go_env(), check=True)
        for binary in missing:
            # go build names a binary after its package's last path element (the module's
            # directory for ".", as our module paths end with it).
            package = module.directory if binary.package == "." else binary.package
            shutil.move(str(Path(tmp) / Path(package).name), bin_dir / binary.name)
    log(f"built {names} in {time.monotonic() - started:.0f} s")


def versions() -> dict[str, str]:
    """The upstream version of each binary, as our go.mod files pin them."""
    k8s = required_versions(MODULES_DIR / "k8s")
    operator = required_versions(MODULES_DIR / "training-operator")
    return {
        "etcd": k8s["go.etcd.io/etcd/server/v3"],
        "kube-apiserver": k8s["k8s.io/kubernetes"],
        "kube-controller-manager": k8s["k8s.io/kubernetes"],
        "kube-scheduler": k8s["k8s.io/kubernetes"],
        "kueue": k8s["sigs.k8s.io/kueue"],
        "jobset": k8s["sigs.k8s.io/jobset"],
        "kwok": k8s["sigs.k8s.io/kwok"],
        "training-operator": operator["github.com/kubeflow/training-operator"],
    }


def module_source(module_path: str, module_dir: str = "k8s") -> Path:
    """Where the Go module cache holds a required module's files (its CRDs, its manifests)."""
    version = required_versions(MODULES_DIR / module_dir)[module_path]
    out = subprocess.run(
        ["go", "mod", "download", "-json", f"{module_path}@{version}"],
        cwd=MODULES_DIR / module_dir,
        env=go_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    match = re.search(r'"Dir":\s*"([^"]+)"', out.stdout)
    if not match:
        raise RuntimeError(f"go mod download {module_path}@{version}: {out.stdout}{out.stderr}")
    return Path(match.group(1))


def main(argv: list[str]) -> int:
    started = time.monotonic()
    paths = build(argv or None)
    for name, path in sorted(paths.items()):
        print(f"  {name:<24} {path}")
    print(f"cluster binaries ready in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
