"""Fleet files → Node objects (quantities and pod requests are kueuemodel.resources')."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import yaml

from kueuemodel.resources import GPU

MIG_PREFIX = "nvidia.com/mig-"
# Time-slicing with the device plugin's `renameByDefault`: the replicas are advertised under
# this name (and nvidia.com/gpu is not advertised), so a pod that asks for a whole GPU does not
# land on a shared one by mistake.
SHARED_GPU = "nvidia.com/gpu.shared"
MIG_PROFILE_ANNOTATION = "kubesim.dev/mig-profile"
MIG_PER_GPU_ANNOTATION = "kubesim.dev/mig-per-gpu"
MIG_STRATEGY_ANNOTATION = "kubesim.dev/mig-strategy"
REPLICAS_ANNOTATION = "kubesim.dev/gpu-replicas"
# Spot capacity (kubesim.spot interrupts such nodes).
CAPACITY_LABEL = "kubesim.dev/capacity-type"
GKE_SPOT_LABEL = "cloud.google.com/gke-spot"
INTERRUPTIONS_ANNOTATION = "kubesim.dev/spot-interruptions"
SPOT_TAINT = {"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NoSchedule"}
GPU_UUIDS_ANNOTATION = "kubesim.dev/gpu-uuids"
POOL_LABEL = "kubesim.dev/pool"
DRIVER_VERSION = "550.127.08"

# Per model: framebuffer MiB, max power W, idle power W, default CPU cores and memory per GPU.
GPU_MODELS: dict[str, dict[str, Any]] = {
    "NVIDIA A100-SXM4-80GB": {"memory": 81920, "tdp": 400, "idle": 60, "family": "ampere"},
    "NVIDIA A100-SXM4-40GB": {"memory": 40960, "tdp": 400, "idle": 55, "family": "ampere"},
    "NVIDIA A100 80GB PCIe": {"memory": 81920, "tdp": 300, "idle": 45, "family": "ampere"},
    "NVIDIA H100 80GB HBM3": {"memory": 81559, "tdp": 700, "idle": 70, "family": "hopper"},
    "NVIDIA H200": {"memory": 143771, "tdp": 700, "idle": 75, "family": "hopper"},
    "NVIDIA L4": {"memory": 23034, "tdp": 72, "idle": 16, "family": "ada-lovelace"},
    "NVIDIA L40S": {"memory": 46068, "tdp": 350, "idle": 35, "family": "ada-lovelace"},
    "Tesla T4": {"memory": 15360, "tdp": 70, "idle": 10, "family": "turing"},
    "Tesla V100-SXM2-32GB": {"memory": 32768, "tdp": 300, "idle": 40, "family": "volta"},
}
DEFAULT_MODEL = {"memory": 40960, "tdp": 300, "idle": 40, "family": "unknown"}


def gpu_uuid(node_name: str, index: int) -> str:
    """Stable GPU UUID for a node's GPU index."""
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"kubesim://{node_name}/gpu/{index}"))


def model_info(model: str) -> dict[str, Any]:
    """Known properties of a GPU model (memory, power), with defaults for unknown models."""
    return GPU_MODELS.get(model, DEFAULT_MODEL)


def load_fleet(source: str | Path | dict) -> list[dict]:
    """Node objects described by a fleet file (path) or an already parsed fleet dict."""
    if isinstance(source, dict):
        fleet = source
    else:
        with open(source, encoding="utf-8") as handle:
            fleet = yaml.safe_load(handle) or {}
    nodes = []
    for pool in fleet.get("pools") or []:
        nodes.extend(pool_nodes(pool))
    return nodes


def topology_labels(pool: dict, index: int) -> dict[str, str]:
    """Topology labels of a pool's index-th node: `topology: [{label, domains}]` (widest level
    first) splits the pool's nodes into that many domains per level, in order; values read
    "<pool>-<level>-<n>", e.g. a100-rack-1."""
    out = {}
    count = max(1, int(pool.get("nodes", 1)))
    for level in pool.get("topology") or []:
        label = level["label"]
        domains = max(1, min(count, int(level.get("domains", 1))))
        short = label.rsplit("/", 1)[-1].removeprefix("topology-")
        out[label] = f"{pool['name']}-{short}-{index * domains // count}"
    return out


def mig_memory_mib(profile: str) -> int:
    """Framebuffer of a MIG instance: "1g.10gb" -> 9728 MiB (its size less 512 MiB)."""
    try:
        gb = float(profile.split(".", 1)[1].lower().removesuffix("gb"))
    except (IndexError, ValueError):
        return 0
    return max(0, int(gb * 1024) - 512)


def accelerator(node: dict) -> tuple[str, int]:
    """The resource a node's GPUs are scheduled as (nvidia.com/gpu, or its MIG profile's) and
    how many of them each physical GPU holds."""
    annotations = node["metadata"].get("annotations") or {}
    profile = annotations.get(MIG_PROFILE_ANNOTATION)
    if profile:
        per_gpu = int(annotations.get(MIG_PER_GPU_ANNOTATION) or 1)
        if annotations.get(MIG_STRATEGY_ANNOTATION) == "single":
            return GPU, per_gpu
        return f"{MIG_PREFIX}{profile}", per_gpu
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    name = SHARED_GPU if SHARED_GPU in allocatable and GPU not in allocatable else GPU
    return name, int(annotations.get(REPLICAS_ANNOTATION) or 1)


def pool_nodes(pool: dict) -> list[dict]:
    """The Node objects of one pool."""
    name = pool["name"]
    model = pool.get("gpuModel", "NVIDIA A100-SXM4-80GB")
    info = model_info(model)
    gpus = int(pool.get("gpusPerNode", 8))
    memory_mib = int(pool.get("gpuMemoryMiB", info["memory"]))
    cpu = str(pool.get("cpu", max(8, gpus * 12)))
    memory = str(pool.get("memory", f"{max(64, gpus * 128)}Gi"))
    pods = str(pool.get("pods", 110))
    taints = [dict(t) for t in pool.get("taints") or []]
    if pool.get("spot") and not any(t.get("key") == SPOT_TAINT["key"] for t in taints):
        taints.append(dict(SPOT_TAINT))  # only what tolerates being reclaimed lands there
    mig = pool.get("mig") or {}
    profile, per_gpu = mig.get("profile"), int(mig.get("perGpu", 1))
    sharing = pool.get("timeSlicing") or {}
    replicas = int(sharing.get("replicas", 1))
    renamed = bool(sharing.get("renameByDefault"))
    nodes = []
    for index in range(int(pool.get("nodes", 1))):
        node_name = f"{name}-node-{index}"
        labels = {
            "kubernetes.io/hostname": node_name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            POOL_LABEL: name,
        }
        if gpus:
            labels.update(
                {
                    "nvidia.com/gpu.present": "true",
                    "nvidia.com/gpu.product": model.replace(" ", "-"),
                    "nvidia.com/gpu.count": str(gpus),
                    "nvidia.com/gpu.memory": str(memory_mib),
                    "nvidia.com/gpu.family": info["family"],
                }
            )
        labels.update({k: str(v) for k, v in (pool.get("labels") or {}).items()})
        labels.update(topology_labels(pool, index))
        if pool.get("spot"):
            labels.update({CAPACITY_LABEL: "spot", GKE_SPOT_LABEL: "true"})
        capacity = {"cpu": cpu, "memory": memory, "pods": pods, "ephemeral-storage": "1Ti"}
        annotations = {}
        if pool.get("interruptions"):
            annotations[INTERRUPTIONS_ANNOTATION] = json.dumps(
                pool["interruptions"], sort_keys=True
            )
        if pool.get("gpuFaults"):
            # GPU faults drawn from a seeded source (kubesim.gpufaults).
            annotations["kubesim.dev/gpu-faults"] = json.dumps(pool["gpuFaults"], sort_keys=True)
        if gpus and profile and mig.get("strategy") == "single":
            # MIG, single strategy: every GPU is cut alike and the instances are advertised
            # as nvidia.com/gpu; GPU feature discovery names the profile in the product.
            instances = gpus * per_gpu
            capacity[GPU] = str(instances)
            labels.update({
                "nvidia.com/mig.capable": "true",
                "nvidia.com/mig.strategy": "single",
                "nvidia.com/gpu.count": str(instances),
                "nvidia.com/gpu.memory": str(mig_memory_mib(profile)),
                "nvidia.com/gpu.product": f"{labels['nvidia.com/gpu.product']}-MIG-{profile}",
            })  # fmt: skip
            annotations.update({MIG_PROFILE_ANNOTATION: profile, MIG_STRATEGY_ANNOTATION: "single",
                                MIG_PER_GPU_ANNOTATION: str(per_gpu)})  # fmt: skip
        elif gpus and profile:
            # MIG, mixed strategy: the device plugin advertises each profile as a resource
            # (and no whole GPUs); GPU feature discovery labels the counts.
            instances = gpus * per_gpu
            capacity[f"{MIG_PREFIX}{profile}"] = str(instances)
            labels.update({
                "nvidia.com/mig.capable": "true",
                "nvidia.com/mig.strategy": "mixed",
                f"{MIG_PREFIX}{profile}.count": str(instances),
                f"{MIG_PREFIX}{profile}.memory": str(mig_memory_mib(profile)),
            })  # fmt: skip
            annotations.update(
                {MIG_PROFILE_ANNOTATION: profile, MIG_PER_GPU_ANNOTATION: str(per_gpu)}
            )
        elif gpus and replicas > 1:
            # Time-slicing: the device plugin advertises each GPU `replicas` times, and GPU
            # feature discovery marks the product as shared, unless renameByDefault advertises
            # them as nvidia.com/gpu.shared (then the product keeps its name).
            capacity[SHARED_GPU if renamed else GPU] = str(gpus * replicas)
            labels.update({
                "nvidia.com/gpu.replicas": str(replicas),
                "nvidia.com/gpu.sharing-strategy": "time-slicing",
            })  # fmt: skip
            if not renamed:
                labels["nvidia.com/gpu.product"] += "-SHARED"
            annotations[REPLICAS_ANNOTATION] = str(replicas)
        elif gpus:
            capacity[GPU] = str(gpus)
        uuids = ",".join(gpu_uuid(node_name, i) for i in range(gpus))
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": node_name,
                "labels": labels,
                "annotations": {
                    GPU_UUIDS_ANNOTATION: uuids,
                    "kubesim.dev/gpu-model": model,
                    "kubesim.dev/driver-version": DRIVER_VERSION,
                    **annotations,
                },
            },
            "spec": {"taints": [dict(t) for t in taints]} if taints else {},
            "status": {
                "capacity": dict(capacity),
                "allocatable": dict(capacity),
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "kubelet is posting ready status (simulated by kubesim)",
                    }
                ],
                "nodeInfo": {
                    "architecture": "amd64",
                    "bootID": str(uuid.uuid5(uuid.NAMESPACE_URL, f"kubesim://{node_name}/boot")),
                    "containerRuntimeVersion": "containerd://1.7.20-kubesim",
                    "kernelVersion": "6.8.0-kubesim",
                    "kubeProxyVersion": "v1.31.0",
                    "kubeletVersion": "v1.31.0",
                    "machineID": uuid.uuid5(uuid.NAMESPACE_URL, f"kubesim://{node_name}").hex,
                    "operatingSystem": "linux",
                    "osImage": "Ubuntu 22.04.4 LTS (simulated by kubesim)",
                    "systemUUID": str(uuid.uuid5(uuid.NAMESPACE_URL, f"kubesim://{node_name}/sys")),
                },
                "addresses": [
                    {"type": "Hostname", "address": node_name},
                ],
            },
        }
        nodes.append(node)
    return nodes
