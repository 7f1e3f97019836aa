"""Render a Job row into the Kubernetes objects it becomes: pure functions, no I/O.

Kueue: a suspended batch/v1 Job (Indexed with a headless Service when it has several workers),
Kubeflow PyTorchJob or JobSet, by the job's kind. Volcano: a batch.volcano.sh/v1alpha1 Job.
User input only ever lands as values in these dicts; nothing here formats YAML text.
"""

from __future__ import annotations

from fleet.models.inventory import SPOT_TAINT
from fleet.quantities import cpu_text, memory_text
from fleet.validators import to_dns1123_label
from queues.manifests.common import (
    GPU_RESOURCE,
    LABEL_JOB_ID,
    LABEL_MANAGED_BY,
    LABEL_TEAM,
    MANAGED_BY,
)
from queues.manifests.podsecurity import secure_pod_spec
from queues.manifests.quotas import cluster_queue_name, local_queue_name, volcano_pool_queue_name

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
EXPECTED_RUNTIME_ANNOTATION = "quartermaster.dev/expected-runtime-seconds"
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
VOLCANO_TASK_INDEX_ANNOTATION = "volcano.sh/task-index"
# The Kubeflow training operator sets the rendezvous variables in the container of this name.
PYTORCH_CONTAINER = "pytorch"
PYTORCH_PORT_NAME = "pytorchjob-port"
JOBSET_WORKERS = "workers"
JOBSET_DRIVER = "driver"
JOBSET_INDEX = "jobset.sigs.k8s.io/job-index"
CHECKPOINT_ENV = "CHECKPOINT_DIR"
# A job's kind -> the API group and kind of the object Kueue queues (its Workload's owner).
KIND_GROUPS = {
    "job": ("batch", "Job"),
    "pytorchjob": ("kubeflow.org", "PyTorchJob"),
    "jobset": ("jobset.x-k8s.io", "JobSet"),
}
KIND_API_VERSIONS = {
    "job": "batch/v1",
    "pytorchjob": "kubeflow.org/v1",
    "jobset": "jobset.x-k8s.io/v1alpha2",
}
# Kueue's topology-aware scheduling: keep a pod set within one domain of a level (a node label).
TOPOLOGY_ANNOTATIONS = {
    "required": "kueue.x-k8s.io/podset-required-topology",
    "preferred": "kueue.x-k8s.io/podset-preferred-topology",
}
# Two pod sets (a PyTorchJob's master and its workers) placed as one: in the same flavor and the
# same topology domain. Kueue takes groups of exactly two, one of them a single pod, with the
# same topology request.
PODSET_GROUP_ANNOTATION = "kueue.x-k8s.io/podset-group-name"
PODSET_GROUP = "job"
CONTAINER_NAME = "main"
VOLCANO_TASK_NAME = "worker"
RENDEZVOUS_PORT = 29500
# Room for "-<index>" pod hostnames and Kueue's "job-<name>-<hash>" Workload names within the
# 63-character label limit that hostnames and label values share.
NAME_MAX = 40
# Pod volume names: a team volume "datasets" is the pod volume "vol-datasets" (a name that
# cannot collide with the shared-memory volume).
VOLUME_PREFIX = "vol-"
SHM_VOLUME = "dshm"

# Volcano policies. An eviction (node drain, preemption) is not the job's fault, so the whole
# gang restarts; a failed pod is the user's code failing, and with torchrun one rank failing
# kills the run, so the job ends at once instead of burning GPU-hours on retries.
VOLCANO_POLICIES = [
    {"event": "PodEvicted", "action": "RestartJob"},
    {"event": "PodFailed", "action": "TerminateJob"},
]
VOLCANO_MAX_RETRY = 3


def job_k8s_name(*, name: str, job_id: int) -> str:
    """Deterministic DNS-1123 name from the job's name and id ('My run' #42 -> 'my-run-42')."""
    suffix = f"-{job_id}"
    stem = to_dns1123_label(name, max_length=NAME_MAX - len(suffix))
    return f"{stem}{suffix}"


def _volcano_queue(job) -> str:
    """A Volcano job waits in its pool's leaf Queue (the pool's limit); a job without a pool
    (only in previews: submission picks one) in the team's Queue."""
    if job.pool_id is not None:
        return volcano_pool_queue_name(job.team, job.pool)
    return cluster_queue_name(job.team)


def job_labels(job) -> dict[str, str]:
    """Labels every object of the job carries, so pods and metrics join back to it."""
    return {
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_TEAM: job.team.slug,
        LABEL_JOB_ID: str(job.id),
    }


def _env_list(env: dict) -> list[dict]:
    return [{"name": str(k), "value": str(v)} for k, v in (env or {}).items()]


def _rendezvous_env(job, *, master_addr: str, rank_annotation: str) -> list[dict]:
    """What torchrun needs: master address and port, node count and rank, processes per node."""
    return [
        {"name": "MASTER_ADDR", "value": master_addr},
        {"name": "MASTER_PORT", "value": str(RENDEZVOUS_PORT)},
        {"name": "WORLD_SIZE", "value": str(job.workers)},
        {"name": "NNODES", "value": str(job.workers)},
        {
            "name": "NODE_RANK",
            "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{rank_annotation}']"}},
        },
        {"name": "NPROC_PER_NODE", "value": str(max(job.gpus_per_worker, 1))},
    ]


def _secret_env(job) -> list[dict]:
    return [
        {"name": var, "valueFrom": {"secretKeyRef": {"name": ref["secret"], "key": ref["key"]}}}
        for var, ref in sorted((job.secret_env or {}).items())
    ]


def _resources(job) -> dict:
    """Requests and limits of one worker: CPU requested (not limited, so a worker may use idle
    cores without being throttled), memory requested and limited alike (a worker over it is
    killed rather than starving its neighbours), GPUs as limits (extended resources)."""
    requests: dict = {}
    limits: dict = {}
    if job.cpu_millis:
        requests["cpu"] = cpu_text(job.cpu_millis)
    if job.memory_mib:
        requests["memory"] = limits["memory"] = memory_text(job.memory_mib)
    if job.gpus_per_worker:
        limits[job.pool.gpu_resource if job.pool_id else GPU_RESOURCE] = str(job.gpus_per_worker)
    out = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


def _container(job, extra_env: list[dict]) -> dict:
    user_env = _env_list(job.env) + _secret_env(job)
    reserved = {e["name"] for e in extra_env}
    container = {
        "name": CONTAINER_NAME,
        "image": job.image,
        "command": [str(c) for c in job.command],
        # Platform-set rendezvous variables win over user variables of the same name.
        "env": [e for e in user_env if e["name"] not in reserved] + extra_env,
    }
    if job.args:
        container["args"] = [str(a) for a in job.args]
    if not container["env"]:
        del container["env"]
    if resources := _resources(job):
        container["resources"] = resources
    mounts = [
        {"name": f"{VOLUME_PREFIX}{m['volume']}", "mountPath": m["mount_path"],
         "readOnly": bool(m["read_only"])}
        for m in job.volumes or []
    ]  # fmt: skip
    if job.shm_mib:
        mounts.append({"name": SHM_VOLUME, "mountPath": "/dev/shm"})
    if mounts:
        container["volumeMounts"] = mounts
    return container


def _volumes(job) -> list[dict]:
    volumes = [
        {"name": f"{VOLUME_PREFIX}{m['volume']}",
         "persistentVolumeClaim": {"claimName": m["volume"], "readOnly": bool(m["read_only"])}}
        for m in job.volumes or []
    ]  # fmt: skip
    if job.shm_mib:
        volumes.append(
            {"name": SHM_VOLUME,
             "emptyDir": {"medium": "Memory", "sizeLimit": memory_text(job.shm_mib)}}
        )  # fmt: skip
    return volumes


def _pod_spec(job, extra_env: list[dict], restart_policy: str, pull_secrets=()) -> dict:
    if job.checkpoint_volume:
        extra_env = [*extra_env, {"name": CHECKPOINT_ENV, "value": job.checkpoint_path}]
    spec: dict = {"restartPolicy": restart_policy, "containers": [_container(job, extra_env)]}
    if volumes := _volumes(job):
        spec["volumes"] = volumes
    if pull_secrets:
        spec["imagePullSecrets"] = [{"name": name} for name in sorted(pull_secrets)]
    if job.pool_id is not None:
        pool = job.pool
        if pool.node_selector:
            spec["nodeSelector"] = dict(pool.node_selector)
        if pool.tolerations:
            spec["tolerations"] = [dict(t) for t in pool.tolerations]
    if job.interruptible and not any(
        t.get("key") == SPOT_TAINT["key"] for t in spec.get("tolerations") or []
    ):
        spec.setdefault("tolerations", []).append({**SPOT_TAINT, "operator": "Equal"})
    return secure_pod_spec(spec, job.team)


def _pod_metadata(job, *, grouped: bool = False, placed: bool = True) -> dict:
    """A pod template's labels and annotations: the job's labels, its expected runtime and, for
    a job kept within one topology domain, the level (`grouped`: this pod set shares it with
    the job's other one, so that all the job's pods are in one domain; `placed` False: a pod
    set the placement is not for, a JobSet's CPU driver)."""
    annotations = {}
    expected = job.expected_runtime_seconds or job.max_runtime_seconds
    annotations[EXPECTED_RUNTIME_ANNOTATION] = str(expected)
    level = job.pool.topology_level(job.topology_level) if job.topology_level and job.pool else None
    if level and placed:
        annotations[TOPOLOGY_ANNOTATIONS[job.topology_mode or "required"]] = level["node_label"]
        if grouped:
            annotations[PODSET_GROUP_ANNOTATION] = PODSET_GROUP
    return {"labels": job_labels(job), "annotations": annotations}


def kueue_job(job, *, name: str | None = None, pull_secrets=()) -> dict:
    """The suspended batch/v1 Job Kueue admits; Indexed with rendezvous env for several workers."""
    name = name or job.k8s_name
    extra_env: list[dict] = []
    if job.workers > 1:
        extra_env = _rendezvous_env(
            job, master_addr=f"{name}-0.{name}", rank_annotation=COMPLETION_INDEX_ANNOTATION
        )
    pod_spec = _pod_spec(job, extra_env, "Never", pull_secrets)
    spec: dict = {
        "suspend": True,
        "parallelism": job.workers,
        "completions": job.workers,
        # Failed worker pods are re-run up to the job's retry limit (0: a lost rank ends a
        # torchrun run, and retrying is a resubmission the user decides on).
        "backoffLimit": job.retry_limit,
        "activeDeadlineSeconds": job.max_runtime_seconds,
        "template": {"metadata": _pod_metadata(job), "spec": pod_spec},
    }
    if job.workers > 1:
        spec["completionMode"] = "Indexed"
        pod_spec["subdomain"] = name
    if job.interruptible:
        # A worker stopped because its node was taken back is replaced, not counted.
        spec["podFailurePolicy"] = {"rules": [{
            "action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
        }]}  # fmt: skip
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _queued_metadata(job, name),
        "spec": spec,
    }


def _queued_metadata(job, name: str) -> dict:
    labels = {**job_labels(job), QUEUE_LABEL: job.local_queue or local_queue_name(job.team),
              PRIORITY_LABEL: job.priority_class or job.tier.name}  # fmt: skip
    return {"name": name, "namespace": job.team.namespace, "labels": labels}


def pytorch_restart(job) -> tuple[str, int]:
    """(replica restartPolicy, runPolicy.backoffLimit) that make a PyTorchJob's retry limit true.

    The training operator fails a PyTorchJob at the first failed replica whose restart policy is
    Never; with OnFailure the kubelet restarts the failed container in place (same pod, node and
    GPUs) and the operator fails the job once the restarts of its replicas add up to the backoff
    limit. So no retries is Never, and N retries is OnFailure with a backoff limit of N + 1: the
    job fails at its worker's (N + 1)th failure."""
    if not job.retry_limit:
        return "Never", 0
    return "OnFailure", job.retry_limit + 1


def pytorch_job(job, *, name: str | None = None, pull_secrets=()) -> dict:
    """A suspended Kubeflow PyTorchJob: one Master and workers-1 Workers; the training operator
    sets MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK in the container named "pytorch". A
    failed worker is restarted in place within the job's retry limit (pytorch_restart)."""
    name = name or job.k8s_name
    restart, backoff = pytorch_restart(job)
    # With workers besides the master, the two pod sets are kept in one topology domain.
    grouped = job.workers > 1

    def replica(count: int) -> dict:
        spec = _pod_spec(job, [], restart, pull_secrets)
        spec["containers"][0]["name"] = PYTORCH_CONTAINER
        spec["containers"][0]["ports"] = [
            {"name": PYTORCH_PORT_NAME, "containerPort": RENDEZVOUS_PORT, "protocol": "TCP"}
        ]
        return {"replicas": count, "restartPolicy": restart,
                "template": {"metadata": _pod_metadata(job, grouped=grouped),
                             "spec": spec}}  # fmt: skip

    replicas = {"Master": replica(1)}
    if job.workers > 1:
        replicas["Worker"] = replica(job.workers - 1)
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": _queued_metadata(job, name),
        "spec": {
            "runPolicy": {
                "suspend": True,
                "backoffLimit": backoff,
                "activeDeadlineSeconds": job.max_runtime_seconds,
                # Pods still running when the master ends are stopped (and stop costing).
                "cleanPodPolicy": "Running",
            },
            "pytorchReplicaSpecs": replicas,
        },
    }


def job_set(job, *, name: str | None = None, pull_secrets=()) -> dict:
    """A suspended JobSet: `workers` one-pod child Jobs (rank from the job index, the first as
    the rendezvous master, reachable through the JobSet's headless subdomain) and, with a
    driver command, a CPU driver whose completion completes the JobSet. A failed child restarts
    the whole set up to the job's retry limit."""
    name = name or job.k8s_name
    env = _rendezvous_env(
        job, master_addr=f"{name}-{JOBSET_WORKERS}-0-0.{name}", rank_annotation=JOBSET_INDEX
    )

    def replicated(rj_name: str, replicas: int, pod_spec: dict) -> dict:
        # A placement in one topology domain is the workers': the CPU driver goes anywhere in
        # the pool (in their domain it would need CPU that workers at their default size
        # leave none of on a full node).
        metadata = _pod_metadata(job, placed=rj_name == JOBSET_WORKERS)
        return {"name": rj_name, "replicas": replicas, "template": {"spec": {
            "parallelism": 1, "completions": 1, "backoffLimit": 0,
            "activeDeadlineSeconds": job.max_runtime_seconds,
            "template": {"metadata": metadata, "spec": pod_spec},
        }}}  # fmt: skip

    workers = replicated(JOBSET_WORKERS, job.workers, _pod_spec(job, env, "Never", pull_secrets))
    replicated_jobs = [workers]
    target = JOBSET_WORKERS
    if job.driver_command:
        spec = _pod_spec(job, env[:1] + [{"name": "WORLD_SIZE", "value": str(job.workers)}],
                         "Never", pull_secrets)  # fmt: skip
        container = spec["containers"][0]
        container["name"] = JOBSET_DRIVER
        container["command"] = [str(c) for c in job.driver_command]
        container.pop("args", None)
        container["resources"] = {"requests": {"cpu": "1", "memory": "2Gi"},
                                  "limits": {"memory": "2Gi"}}  # fmt: skip
        replicated_jobs.insert(0, replicated(JOBSET_DRIVER, 1, spec))
        target = JOBSET_DRIVER
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": _queued_metadata(job, name),
        "spec": {
            "suspend": True,
            "network": {"enableDNSHostnames": True, "subdomain": name},
            "replicatedJobs": replicated_jobs,
            "successPolicy": {"operator": "All", "targetReplicatedJobs": [target]},
            "failurePolicy": {"maxRestarts": job.retry_limit},
        },
    }


def headless_service(job, *, name: str | None = None) -> dict:
    """The headless Service that gives each indexed pod a DNS name for rendezvous."""
    name = name or job.k8s_name
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": job.team.namespace, "labels": job_labels(job)},
        "spec": {
            "clusterIP": "None",
            "selector": {LABEL_JOB_ID: str(job.id)},
            # Ranks must resolve each other before they report ready.
            "publishNotReadyAddresses": True,
            "ports": [{"name": "rendezvous", "port": RENDEZVOUS_PORT, "protocol": "TCP"}],
        },
    }


def volcano_job(job, *, name: str | None = None, pull_secrets=()) -> dict:
    """The vcjob: a gang of `workers` pods in the team's queue, with svc/env plugins."""
    name = name or job.k8s_name
    queue = _volcano_queue(job)
    extra_env: list[dict] = []
    if job.workers > 1:
        extra_env = _rendezvous_env(
            job,
            master_addr=f"{name}-{VOLCANO_TASK_NAME}-0.{name}",
            rank_annotation=VOLCANO_TASK_INDEX_ANNOTATION,
        )
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": job.team.namespace, "labels": job_labels(job)},
        "spec": {
            "schedulerName": "volcano",
            "queue": queue,
            "minAvailable": job.workers if job.gang else 1,
            "priorityClassName": job.tier.name,
            "maxRetry": VOLCANO_MAX_RETRY,
            "policies": [dict(p) for p in VOLCANO_POLICIES],
            "plugins": {"svc": [], "env": []},
            "tasks": [
                {
                    "name": VOLCANO_TASK_NAME,
                    "replicas": job.workers,
                    "template": {
                        "metadata": _pod_metadata(job),
                        "spec": {
                            **_pod_spec(job, extra_env, "Never", pull_secrets),
                            "activeDeadlineSeconds": job.max_runtime_seconds,
                        },
                    },
                }
            ],
        },
    }
