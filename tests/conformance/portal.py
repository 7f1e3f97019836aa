"""The portal on the real control plane: a world of the portal's own rows over the shared real
cluster, built through the portal's services, and what its tests do with it.

`PortalWorld` registers the running real cluster as a Cluster row (through `cluster_register`,
its DCGM exporter among the cluster's scrape URLs), defines one NodePool per pool of the fleet
file it was started with (`cluster/fleet.yaml`: same node labels, taints, spot capacity and the
a100 racks as topology levels), and makes a department of two teams whose slugs are the test's
own, so that their namespaces, ClusterQueues and Cohort collide with no other test. The
ResourceFlavors, Topology and WorkloadPriorityClasses are named after pools and tiers, the same
in every test: each test applies the same objects again.

Tasks run in-process as the services queue them (Celery eager mode, each after its
transaction commits); `sync_until` runs the status sync as the beat and the watcher do. At the
end, `teardown` removes the test's namespaces (their jobs and pods) and its cluster-scoped
queues, and waits until the pods have gone, so that the next test finds the nodes free.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from cluster.testing import wait_for
from fleet.models import GpuModel, NodePool
from queues.models import Job, Membership, Quota
from tests.factories import (
    DepartmentFactory,
    MembershipFactory,
    TeamFactory,
    UserFactory,
    manager_of,
    platform_admin,
)
from tests.queues.builders import make_tiers

ACCELERATOR = "accelerator"
RACK_LABEL = "cloud.provider.com/topology-rack"
HOSTNAME_LABEL = "kubernetes.io/hostname"
# How pods on kwok nodes run (cluster/kwok_stages.yaml reads these from a container's env).
DURATION_ENV = "QM_TEST_DURATION"
EXIT_CODE_ENV = "QM_TEST_EXIT_CODE"
KUEUE = ("kueue.x-k8s.io", "v1beta2")


def pool_specs(fleet: dict) -> dict[str, dict]:
    """pool name -> what pool_create takes (besides the cluster and the model), from a fleet
    file, as a platform admin would describe the same nodes."""
    specs = {}
    for pool in fleet.get("pools") or []:
        taints = [dict(t) for t in pool.get("taints") or []]
        levels = [
            {"name": "rack", "node_label": t["label"]}
            for t in pool.get("topology") or []
            if t["label"] == RACK_LABEL
        ]
        if levels:
            levels.append({"name": "host", "node_label": HOSTNAME_LABEL})
        specs[pool["name"]] = {
            "gpu_model": pool["gpuModel"],
            "node_selector": {ACCELERATOR: pool["labels"][ACCELERATOR]},
            "taints": taints,
            "capacity_type": "spot" if pool.get("spot") else "on-demand",
            "interconnect": "nvlink" if "SXM" in pool["gpuModel"] else "pcie",
            "topology_levels": levels,
        }
    return specs


def gpu_model(name: str) -> GpuModel:
    """The GpuModel of a fleet file's model name, identified as GPU feature discovery and the
    DCGM exporter name it."""
    product = name.replace(" ", "-")
    model, _ = GpuModel.objects.get_or_create(
        name=product.removeprefix("NVIDIA-"),
        defaults={"product_labels": [product], "dcgm_model_names": [name]},
    )
    return model


@dataclass
class PortalWorld:
    """The real cluster as the portal knows it, and one department of two teams."""

    kubeconfig: Path
    info: dict
    api: k8s.ApiClient
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:6])
    cluster: Any = None
    pools: dict[str, NodePool] = field(default_factory=dict)
    users: dict[str, Any] = field(default_factory=dict)
    teams: dict[str, Any] = field(default_factory=dict)
    department: Any = None
    tiers: dict[str, Any] = field(default_factory=dict)
    extra_nodes: list[str] = field(default_factory=list)
    # pytest-django's django_capture_on_commit_callbacks: what the services queue after their
    # transaction commits runs when the block ends (the test itself runs in one transaction).
    capture: Any = None

    def committing(self):
        """A block whose on-commit work (the tasks the services queue) runs as it ends."""
        return self.capture(execute=True)

    # -- building --------------------------------------------------------------------------

    def register(self, fleet: dict) -> None:
        """The cluster registered by a platform admin, its pools defined, tiers and teams."""
        from fleet.services.clusters import cluster_register
        from fleet.services.pools import pool_create

        admin = self.users["admin"] = platform_admin(f"admin-{self.tag}")
        self.cluster = cluster_register(
            actor=admin,
            name="real",
            kubeconfig_path=str(self.kubeconfig),
            dcgm_scrape_urls=[self.info["dcgm_url"]],
            is_default=True,
        )
        for name, spec in pool_specs(fleet).items():
            spec = dict(spec)
            model = gpu_model(spec.pop("gpu_model"))
            self.pools[name] = pool_create(
                actor=admin, cluster=self.cluster, name=name, gpu_model=model, **spec
            )
        self.tiers = make_tiers()
        dept = self.department = DepartmentFactory(slug=f"c{self.tag}", name=f"Dept {self.tag}")
        for short in ("a", "b"):
            slug = f"c{self.tag}-{short}"
            team = TeamFactory(slug=slug, name=f"Team {short} {self.tag}", department=dept,
                               namespace=f"qm-{slug}")  # fmt: skip
            self.teams[short] = team
            member = self.users[short] = UserFactory(username=f"{short}-{self.tag}")
            MembershipFactory(user=member, team=team, role=Membership.Role.MEMBER)
            lead = self.users[f"{short}-lead"] = UserFactory(username=f"{short}-lead-{self.tag}")
            MembershipFactory(user=lead, team=team, role=Membership.Role.LEAD)
        self.users["manager"] = manager_of(dept, f"manager-{self.tag}")

    def quota(self, team: str, pool: str, gpus: int, **limits) -> Quota:
        """A team's quota in a pool (as a decided request would leave it)."""
        quota, _ = Quota.objects.update_or_create(
            team=self.teams[team], pool=self.pools[pool],
            defaults={"nominal_gpus": gpus, **limits},
        )  # fmt: skip
        return quota

    def sync_inventory(self):
        from fleet.services.inventory import cluster_sync_inventory

        result = cluster_sync_inventory(cluster=self.cluster)
        for pool in self.pools.values():
            pool.refresh_from_db()
        return result

    def reconcile(self) -> dict:
        """The reconcile task, as the beat or a quota change queues it."""
        from queues.tasks import reconcile_cluster

        return reconcile_cluster(self.cluster.pk)

    # -- jobs ------------------------------------------------------------------------------

    def submit(self, *, team="a", user=None, run="3s", exit_code=None, env=None, **spec) -> Job:
        """A job submitted through the service, its pods told how long to run (and how to end)."""
        from queues.services.jobs.submit import job_submit

        with self.committing():
            job = job_submit(**self._job_spec(team, user, run, exit_code, env, spec))
        job.refresh_from_db()  # the apply task ran after the submission committed
        return job

    def _job_spec(self, team, user, run, exit_code, env, spec) -> dict:

        values = {
            "name": "train",
            "image": "ghcr.io/acme/train:1.0",
            "command": ["python", "train.py"],
            "workers": 1,
            "gpus_per_worker": 1,
            "pool": "l4",
            "max_runtime_seconds": 3600,
            **spec,
        }
        env = {DURATION_ENV: run, **(env or {})}
        if exit_code is not None:
            env[EXIT_CODE_ENV] = str(exit_code)
        values["env"] = env
        return {"user": self.users[user or team], "team": self.teams[team], **values}

    def apply(self, job: Job) -> str:
        from queues.services.jobs.apply import job_apply

        outcome = job_apply(job_id=job.pk)
        job.refresh_from_db()
        return outcome

    def sync(self) -> dict:
        from queues.services.jobs.sync import jobs_sync_cluster

        return jobs_sync_cluster(cluster=self.cluster)

    def sync_until(self, job: Job, states, *, timeout: float = 60.0, check=None) -> Job:
        """Run the status sync until the job reaches one of `states` (and `check(job)` holds)."""
        states = {states} if isinstance(states, str) else set(states)

        def reached():
            self.sync()
            job.refresh_from_db()
            return job.state in states and (check is None or check(job))

        wait_for(reached, timeout=timeout, interval=0.5,
                 what=f"job {job.name} to reach {', '.join(sorted(states))} ({job.state}: "
                 f"{job.pending_reason or job.exit_reason})")  # fmt: skip
        return job

    # -- the cluster as a test reads it -----------------------------------------------------

    @property
    def core(self) -> k8s.CoreV1Api:
        return k8s.CoreV1Api(self.api)

    @property
    def custom(self) -> k8s.CustomObjectsApi:
        return k8s.CustomObjectsApi(self.api)

    def kueue(self, plural: str, name: str, namespace: str | None = None) -> dict:
        if namespace:
            return self.custom.get_namespaced_custom_object(*KUEUE, namespace, plural, name)
        return self.custom.get_cluster_custom_object(*KUEUE, plural, name)

    def pods(self, job: Job) -> list[k8s.V1Pod]:
        return self.core.list_namespaced_pod(
            job.team.namespace, label_selector=f"quartermaster.dev/job-id={job.pk}"
        ).items

    def add_node(self, node: dict) -> str:
        """A node of the test's own (kwok runs its pods), removed at teardown."""
        node = dict(node)
        node["metadata"] = {**node["metadata"]}
        annotations = {**(node["metadata"].get("annotations") or {}), "kwok.x-k8s.io/node": "fake"}
        node["metadata"]["annotations"] = annotations
        name = node["metadata"]["name"]
        self.core.create_node(node)
        self.extra_nodes.append(name)
        wait_for(
            lambda: any(
                c.type == "Ready" and c.status == "True"
                for c in self.core.read_node(name).status.conditions or []
            ),
            what=f"node {name} to be Ready",
        )
        return name

    # -- cleaning up -----------------------------------------------------------------------

    def teardown(self) -> None:
        """Remove what the test put in the shared cluster and wait until its pods are gone."""
        custom, core = self.custom, self.core
        namespaces = [t.namespace for t in self.teams.values()]
        started = time.monotonic()
        for namespace in namespaces:
            # Pods first, without a grace period: kwok stops them at once, and the namespace's
            # own deletion would take its controller several seconds more.
            _ignore_missing(core.delete_collection_namespaced_pod, namespace,
                            grace_period_seconds=0)  # fmt: skip
            _ignore_missing(core.delete_namespace, namespace)
        for team in self.teams.values():
            _ignore_missing(
                custom.delete_cluster_custom_object, *KUEUE, "clusterqueues", f"qm-{team.slug}"
            )
        if self.department is not None:
            _ignore_missing(
                custom.delete_cluster_custom_object, *KUEUE, "cohorts", f"qm-{self.department.slug}"
            )
        for namespace in namespaces:
            while time.monotonic() < started + 60:
                try:
                    if not core.list_namespaced_pod(namespace).items:
                        break
                except k8s.ApiException as exc:
                    if exc.status == 404:
                        break
                    raise
                time.sleep(0.25)
        for name in self.extra_nodes:
            _ignore_missing(core.delete_node, name)


def _ignore_missing(call, *args, **kwargs) -> None:
    try:
        call(*args, **kwargs)
    except k8s.ApiException as exc:
        if exc.status != 404:
            raise
