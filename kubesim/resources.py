"""Registry of the resource types kubesim serves, with their scope, short names and subresources."""

from __future__ import annotations

import functools
from dataclasses import dataclass


@dataclass(frozen=True)
class ResourceType:
    """One served group/version/resource."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ("status",)
    singular: str = ""
    categories: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def storage_key(self) -> tuple[str, str]:
        """Versions of one group/resource share storage, keyed by (group, plural)."""
        return (self.group, self.plural)

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources

    @property
    def singular_name(self) -> str:
        return self.singular or self.kind.lower()

    def __str__(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


CORE = ""
BATCH = "batch"
SCHEDULING = "scheduling.k8s.io"
KUEUE = "kueue.x-k8s.io"
VOLCANO_SCHED = "scheduling.volcano.sh"
VOLCANO_BATCH = "batch.volcano.sh"
KUBEFLOW = "kubeflow.org"
JOBSET = "jobset.x-k8s.io"

NAMESPACES = ResourceType(CORE, "v1", "namespaces", "Namespace", False, ("ns",))
NODES = ResourceType(CORE, "v1", "nodes", "Node", False, ("no",))
PODS = ResourceType(CORE, "v1", "pods", "Pod", True, ("po",), categories=("all",))
SERVICES = ResourceType(CORE, "v1", "services", "Service", True, ("svc",), categories=("all",))
EVENTS = ResourceType(CORE, "v1", "events", "Event", True, ("ev",), ())
CONFIGMAPS = ResourceType(CORE, "v1", "configmaps", "ConfigMap", True, ("cm",), ())
SECRETS = ResourceType(CORE, "v1", "secrets", "Secret", True, (), ())
RESOURCE_QUOTAS = ResourceType(CORE, "v1", "resourcequotas", "ResourceQuota", True, ("quota",))
LIMIT_RANGES = ResourceType(CORE, "v1", "limitranges", "LimitRange", True, ("limits",), ())
NETWORK_POLICIES = ResourceType(
    "networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", True, ("netpol",), ()
)
ROLE_BINDINGS = ResourceType(
    "rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True, (), ()
)
PVCS = ResourceType(CORE, "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True, ("pvc",))
STORAGE_CLASSES = ResourceType(
    "storage.k8s.io", "v1", "storageclasses", "StorageClass", False, ("sc",), ()
)
JOBS = ResourceType(BATCH, "v1", "jobs", "Job", True, (), categories=("all",))
# What deploying the portal itself creates (stored and served; no controller acts on them).
SERVICE_ACCOUNTS = ResourceType(CORE, "v1", "serviceaccounts", "ServiceAccount", True, ("sa",), ())
DEPLOYMENTS = ResourceType(
    "apps", "v1", "deployments", "Deployment", True, ("deploy",), categories=("all",)
)
PDBS = ResourceType("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, ("pdb",))
HPAS = ResourceType(
    "autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler", True, ("hpa",)
)
INGRESSES = ResourceType("networking.k8s.io", "v1", "ingresses", "Ingress", True, ("ing",))
CLUSTER_ROLES = ResourceType(
    "rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False, (), ()
)
CLUSTER_ROLE_BINDINGS = ResourceType(
    "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False, (), ()
)
PRIORITY_CLASSES = ResourceType(
    SCHEDULING, "v1", "priorityclasses", "PriorityClass", False, ("pc",), ()
)
# Stored and served, never enforced: kubesim has no admission (the real control plane does).
ADMISSION_POLICIES = ResourceType(
    "admissionregistration.k8s.io", "v1", "validatingadmissionpolicies",
    "ValidatingAdmissionPolicy", False, (), (),
)  # fmt: skip
ADMISSION_POLICY_BINDINGS = ResourceType(
    "admissionregistration.k8s.io", "v1", "validatingadmissionpolicybindings",
    "ValidatingAdmissionPolicyBinding", False, (), (),
)  # fmt: skip


def _kueue(version: str) -> list[ResourceType]:
    return [
        ResourceType(
            KUEUE,
            version,
            "resourceflavors",
            "ResourceFlavor",
            False,
            ("flavor", "flavors", "rf"),
            (),
        ),
        ResourceType(KUEUE, version, "cohorts", "Cohort", False, ("co",)),
        ResourceType(KUEUE, version, "clusterqueues", "ClusterQueue", False, ("cq",)),
        ResourceType(KUEUE, version, "localqueues", "LocalQueue", True, ("queue", "queues", "lq")),
        ResourceType(
            KUEUE, version, "workloadpriorityclasses", "WorkloadPriorityClass", False, ("wpc",), ()
        ),
        ResourceType(
            KUEUE,
            version,
            "workloads",
            "Workload",
            True,
            ("kwl", "kueueworkload", "kueueworkloads"),
        ),
        ResourceType(KUEUE, version, "admissionchecks", "AdmissionCheck", False, ("ac",)),
        ResourceType(KUEUE, version, "topologies", "Topology", False, ("topo",), ()),
    ]


KUEUE_V1BETA2 = _kueue("v1beta2")
KUEUE_V1BETA1 = _kueue("v1beta1")
(
    RESOURCE_FLAVORS,
    COHORTS,
    CLUSTER_QUEUES,
    LOCAL_QUEUES,
    WORKLOAD_PRIORITY_CLASSES,
    WORKLOADS,
    ADMISSION_CHECKS,
    TOPOLOGIES,
) = KUEUE_V1BETA2

VOLCANO_QUEUES = ResourceType(
    VOLCANO_SCHED, "v1beta1", "queues", "Queue", False, ("q", "queue-v1beta1")
)
PODGROUPS = ResourceType(
    VOLCANO_SCHED, "v1beta1", "podgroups", "PodGroup", True, ("pg", "podgroup-v1beta1"), ()
)
VCJOBS = ResourceType(VOLCANO_BATCH, "v1alpha1", "jobs", "Job", True, ("vcjob", "vj"))
PYTORCHJOBS = ResourceType(
    KUBEFLOW, "v1", "pytorchjobs", "PyTorchJob", True, (), categories=("all",)
)
JOBSETS = ResourceType(JOBSET, "v1alpha2", "jobsets", "JobSet", True, (), categories=("all",))

ALL: tuple[ResourceType, ...] = (
    NAMESPACES,
    NODES,
    PODS,
    SERVICES,
    EVENTS,
    CONFIGMAPS,
    SECRETS,
    RESOURCE_QUOTAS,
    LIMIT_RANGES,
    NETWORK_POLICIES,
    ROLE_BINDINGS,
    PVCS,
    STORAGE_CLASSES,
    JOBS,
    SERVICE_ACCOUNTS,
    DEPLOYMENTS,
    PDBS,
    HPAS,
    INGRESSES,
    CLUSTER_ROLES,
    CLUSTER_ROLE_BINDINGS,
    PRIORITY_CLASSES,
    ADMISSION_POLICIES,
    ADMISSION_POLICY_BINDINGS,
    *KUEUE_V1BETA2,
    *KUEUE_V1BETA1,
    VOLCANO_QUEUES,
    PODGROUPS,
    VCJOBS,
    PYTORCHJOBS,
    JOBSETS,
)

# The version each group/resource is stored in; other served versions convert to and from it.
STORAGE_VERSIONS = {KUEUE: "v1beta2"}
PREFERRED_VERSIONS = {KUEUE: "v1beta2"}

_BY_GVR = {(rt.group, rt.version, rt.plural): rt for rt in ALL}
_BY_GVK = {(rt.api_version, rt.kind): rt for rt in ALL}
_STORAGE = {
    rt.storage_key: rt for rt in ALL if STORAGE_VERSIONS.get(rt.group, rt.version) == rt.version
}


def get(group: str, version: str, plural: str) -> ResourceType | None:
    """The type served at /apis/<group>/<version>/<plural> (group "" for the core API)."""
    return _BY_GVR.get((group, version, plural))


def by_kind(api_version: str, kind: str) -> ResourceType | None:
    """The type for an object's apiVersion and kind."""
    return _BY_GVK.get((api_version, kind))


def storage_type(rt: ResourceType) -> ResourceType:
    """The storage version of rt's group/resource."""
    return _STORAGE[rt.storage_key]


def storage_for_key(storage_key: tuple[str, str]) -> ResourceType:
    """The storage-version type of a (group, plural) storage key."""
    return _STORAGE[storage_key]


@functools.cache
def group_versions() -> dict[str, list[str]]:
    """Served groups (without the core group) and their versions, preferred first (read-only)."""
    out: dict[str, list[str]] = {}
    for rt in ALL:
        if rt.group and rt.version not in out.setdefault(rt.group, []):
            out[rt.group].append(rt.version)
    for group, versions in out.items():
        preferred = PREFERRED_VERSIONS.get(group)
        if preferred in versions:
            versions.remove(preferred)
            versions.insert(0, preferred)
    return out


def in_group_version(group: str, version: str) -> list[ResourceType]:
    """Types served in one group/version, in registry order."""
    return [rt for rt in ALL if rt.group == group and rt.version == version]
