"""What every rendered object shares: the portal's labels and annotations, and how manifests are
hashed, identified, dumped as YAML and diffed. Pure functions."""

from __future__ import annotations

import difflib
import hashlib
import json

import yaml

GPU_RESOURCE = "nvidia.com/gpu"

LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "quartermaster"
# Selects every object the portal manages (jobs, pods, queues).
MANAGED_SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY}"
LABEL_TEAM = "quartermaster.dev/team"
LABEL_DEPARTMENT = "quartermaster.dev/department"
LABEL_POOL = "quartermaster.dev/pool"
LABEL_TIER = "quartermaster.dev/tier"
LABEL_JOB_ID = "quartermaster.dev/job-id"
LABEL_MEMBER = "quartermaster.dev/member"  # a member's own LocalQueue: whose it is
ANNOTATION_HOLD = "quartermaster.dev/hold-reason"


def manifest_hash(manifest: dict) -> str:
    """A stable SHA-256 of a manifest (sorted keys), to tell whether it changed."""
    return hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()


def manifest_identity(manifest: dict) -> tuple[str, str, str, str]:
    """(apiVersion, kind, namespace, name) of a manifest."""
    meta = manifest["metadata"]
    return manifest["apiVersion"], manifest["kind"], meta.get("namespace", ""), meta["name"]


def manifest_yaml(manifest: dict | None) -> str:
    """A manifest as YAML, keys in a stable order (for files and diffs)."""
    if not manifest:
        return ""
    return yaml.safe_dump(manifest, sort_keys=True, default_flow_style=False)


def manifest_diff(before: dict | None, after: dict | None, *, name: str = "") -> str:
    """A unified diff of two manifests' YAML dumps ("" when equal)."""
    lines = difflib.unified_diff(
        manifest_yaml(before).splitlines(keepends=True),
        manifest_yaml(after).splitlines(keepends=True),
        fromfile=f"a/{name}",
        tofile=f"b/{name}",
    )
    return "".join(lines)
