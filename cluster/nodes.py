"""kwok nodes from a kubesim fleet file, and the kwok stages that run their pods.

The nodes are kubesim's own (kubesim.fleet.load_fleet: GPU capacity and allocatable, MIG and
time-sliced resources with or without the device plugin's `renameByDefault`, GPU feature
discovery labels, taints, topology and spot labels), so both clusters hold the same fleet. kwok
needs one thing more: the annotation it manages nodes by.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import yaml

from kubesim.fleet import load_fleet

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
STAGES_FILE = Path(__file__).resolve().parent / "kwok_stages.yaml"


def read_fleet(path: str | Path) -> dict:
    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle) or {}


def fleet_nodes(fleet: dict) -> list[dict]:
    """The Node objects of a parsed fleet file, ready to create on the real API server."""
    nodes = []
    for node in load_fleet(fleet):
        node = copy.deepcopy(node)
        meta = node["metadata"]
        meta["annotations"][KWOK_ANNOTATION] = "fake"
        # kwok's node stage writes the conditions, addresses and the kubelet's endpoint, as a
        # kubelet registering the node would.
        status = node["status"]
        status.pop("conditions", None)
        status.pop("addresses", None)
        nodes.append(node)
    return nodes


def stages(default_duration: str = "10s") -> list[dict]:
    """Our kwok Stage objects, with the run time of a pod that names none."""
    millis = int(_seconds(default_duration) * 1000)
    text = STAGES_FILE.read_text(encoding="utf-8")
    text = text.replace("QM_DEFAULT_DURATION_MS", str(millis))
    text = text.replace("QM_DEFAULT_DURATION", default_duration)
    return [doc for doc in yaml.safe_load_all(text) if doc]


def _seconds(duration: str) -> float:
    """A Go duration's seconds ("90s", "2m", "1h30m", "500ms", or a bare number of seconds)."""
    text = duration.strip()
    if re.fullmatch(r"[0-9.]+", text):
        return float(text)
    parts = re.findall(r"([0-9.]+)(ms|h|m|s)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a duration: {duration!r}")
    factor = {"h": 3600, "m": 60, "s": 1, "ms": 0.001}
    return sum(float(n) * factor[u] for n, u in parts)
