"""What every scheduler's backend does for the portal, behind one interface: render a job and a
cluster's quota objects, observe the cluster's jobs and queues and record what it sees, explain
what it says, and act on a job (suspend, resume). The rest of the portal asks the backend of a
cluster (queues.backends.backend_for) instead of comparing `cluster.scheduler` itself.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Observed:
    """What one cluster looks like, from one list per kind."""

    jobs: dict = field(default_factory=dict)  # (ns, name) -> batch Job / vcjob
    workloads: dict = field(default_factory=dict)  # (ns, job name) -> Workload
    pods: dict = field(default_factory=dict)  # job id -> [pod]
    positions: dict = field(default_factory=dict)  # (ns, workload name) -> 1-based position
    # Volcano: (ns, vcjob name) -> GPUs of the PodGroups ahead of it in its queue
    gpus_ahead: dict = field(default_factory=dict)
    # Jobs still waiting: (job, scheduler's message, its queue fields: queue_position, and on
    # Kueue workload_name; None where the scheduler shows no queue)
    waiting: list = field(default_factory=list)
    # namespace -> its Events, read when first asked (a preemption the sync did not see is
    # told from them); None where no client is at hand.
    events_of: Callable[[str], list[dict]] | None = None


class Backend(ABC):
    """One scheduler (Kueue or Volcano) as the portal uses it."""

    #: The Cluster.Scheduler value it serves.
    name: str
    #: The job kinds (Job.Kind values) its clusters run.
    job_kinds: tuple[str, ...]
    #: Whether a job may start some of its workers before the others (gang off).
    gang_optional: bool
    #: Whether a failed worker is run again within the job's own retry limit.
    retries_per_job: bool
    #: Whether a team may queue each member's jobs in a queue of their own (member fair sharing).
    member_queues: bool
    #: Whether a running job's priority can change (preemption protection, checkpoint-aware
    #: victims); Volcano's pods take their PriorityClass once, at creation.
    priority_protection: bool = False

    # -- submitting ------------------------------------------------------------------------

    def pool_for_any_pool(self, *, team, cluster_id: int, gpus: int):
        """The pool an "any pool" job is placed in when it is submitted, or None when the
        scheduler picks one itself."""
        return None

    # -- rendering (pure: model instances in, manifests out) -------------------------------

    @abstractmethod
    def job_objects(self, job, *, name: str | None = None, pull_secrets=()) -> list[dict]:
        """Every object the job becomes on a cluster of this scheduler, in apply order.
        `pull_secrets`: the names of the team's image pull secrets on that cluster."""

    @abstractmethod
    def cluster_objects(
        self, *, cluster, pools, departments, teams, tiers, quotas, sizes=None, volumes=(),
        members=None,
    ) -> list[tuple]:  # fmt: skip
        """Everything the cluster should hold, as (owner type, owner id, manifest), from plain
        model instances; no database access. `sizes`: the pools' WorkerSize by pool id;
        `volumes`: the teams' volumes on this cluster; `members`: per team id, [(user,
        weight)] whose own queues it needs (member fair sharing, and jobs still queued in
        them)."""

    # -- observing -------------------------------------------------------------------------

    @abstractmethod
    def watched_kinds(self, cluster) -> list[tuple[str, str, str | None]]:
        """(apiVersion, kind, label selector) the job watcher follows besides pods."""

    @abstractmethod
    def observe(self, *, cluster, client, seen: Observed, teams_pending=(), kinds=("job",)):
        """List the cluster's jobs of the given kinds (and what queues them) into `seen`, with
        the queue positions of the teams that have jobs waiting."""

    @abstractmethod
    def sync_job(self, job, *, obj: dict | None, seen: Observed, pools: dict, now) -> bool:
        """Bring an active job up to date with its object (`obj`, None when it is not there)
        and what else `seen` holds; a job still waiting goes on `seen.waiting` to be
        explained. True when its state changed."""

    @abstractmethod
    def quota_held(self, *, cluster, client) -> dict[tuple[int, int], int]:
        """(team id, pool id) -> units of the pool's GPU resource the team's queue holds now."""

    def start_estimator(self, *, team, pools, now):
        """A function (gpus, ahead) -> (estimated start, how it was made) for the team's jobs
        waiting in `pools` (None when there is nothing to estimate from): Kueue's rules."""
        from queues.selectors.jobs import start_estimator

        return start_estimator(team=team, pools=pools, now=now)

    # -- acting ----------------------------------------------------------------------------

    def job_set_priority_class(self, job, name: str) -> None:
        """Give a job's object another priority class (only where priority_protection)."""
        raise NotImplementedError(f"{self.name} jobs keep the priority they started with")

    @abstractmethod
    def job_set_active(self, job, active: bool) -> None:
        """Suspend (False) or resume (True) a job in the cluster; raises kube errors, and a
        ValidationError where the scheduler cannot."""
