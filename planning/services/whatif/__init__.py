"""The what-if simulator: replay the recorded jobs of the last days against today's quota
configuration and against a proposal, side by side, on Kueue's rules (kueuemodel's replay, a
simulated clock), check that the replay of today's configuration gives back what happened, and
file the quota requests a proposal implies.

By stage: proposal (who may, a proposal checked entry by entry), history (the recorded jobs as
the replay takes them), scenario (one configuration's queues, pools and jobs, replayed),
figures (per team, member and pool), agreement (the replay of today's configuration against
the history, and why they differ where they do), runs (a run's life on the workers), apply.

What is replayed, per Kueue cluster: every job submitted in the window that reached the queue
(not drafts, rejected or never-applied ones), arriving when it was created in the cluster (its
queued time: Kueue saw it then), with its size, its tier's priority (or the proposal's), and
how long it held its quota as it ran: the stretches its pods ran (pods that overlap or follow a
failed or interrupted one are one stretch: the workload kept its quota while the Job ran the
worker again; a gap after a stopped pod is a preemption), the last stretch to its finish (its
retries included; with checkpoints, the work of its earlier stretches too). A job still running
at the end runs at least to the end; one preempted and waiting at the end runs its expected,
else maximum, run time, as does one that never started; a cancelled job leaves when it was
cancelled, waiting or running; one admitted that failed before its pods ran holds its quota from
admission to failure. ClusterQueues and LocalQueues are rendered as for the cluster (queue
holds aside, the proposal's fair-sharing weights), and the departments' Cohorts (under the
organisation's for those that share with it, today or in the proposal); each pool has its
nodes; Kueue's fair sharing is on where the cluster's ClusterQueues report a share (or as the
proposal says).

Figures, per team: jobs, median and p90 queue wait (from the submission, so that a delay before
the cluster saw the job counts in both, to the first start, or until the job left the queue
unstarted, or the end of the window), preemptions, GPU-hours run, utilisation of its nominal
quota (GPU-hours run / (nominal GPUs × hours)), and their cost at the price book's price of each
pool's GPU; per pool: capacity, GPU-hours busy and idle. Beside them, the waits as they
happened, and whether the replay of today's configuration agrees with them (agreement).

Pods are placed on the pool's nodes as kubesim's scheduler binds them (fewest free GPUs that
fit), so fragmentation delays large jobs as it did; a proposal that resizes a pool adds nodes
like its largest or removes them from the end.

A team that shares its queue fairly among its members (today's setting, or the proposal's) is
replayed with Kueue's admission fair sharing at the portal's half-life (member_fair_sharing_config):
each member's jobs wait in their own LocalQueue, whose usage memory starts as Kueue's would be
when the window opened (its jobs of the six half-lives before, sampled as Kueue samples);
its figures add each member's jobs and waits.

Jobs submitted before the window that had not ended when it opened are carried over: one whose
pods were running then holds its GPUs from the start for what was left of that run (whatever the
quota now says: Kueue does not evict what it admitted), one that was waiting (never started, or
preempted before the window) queues at the start in its turn; their waits are not the window's.
A preempted job starts its run over, unless it writes checkpoints (a checkpoint volume): then it
goes on from where its workers had got to.
"""

from planning.services.whatif.apply import whatif_apply
from planning.services.whatif.proposal import (
    MAX_DAYS,
    MAX_GPUS,
    proposal_clean,
    whatif_create,
    whatif_runs,
    whatif_teams,
)
from planning.services.whatif.runs import (
    CLAIM_TTL,
    REDISPATCH_AFTER,
    whatif_execute,
    whatif_release_dead,
    whatif_resume,
)
from planning.services.whatif.scenario import (
    member_fair_sharing_config,
    replay_processes,
    replay_queues,
    whatif_compute,
)

__all__ = [
    "CLAIM_TTL", "MAX_DAYS", "MAX_GPUS", "REDISPATCH_AFTER", "member_fair_sharing_config",
    "proposal_clean", "replay_processes", "replay_queues", "whatif_apply", "whatif_compute",
    "whatif_create", "whatif_execute", "whatif_release_dead", "whatif_resume", "whatif_runs",
    "whatif_teams",
]  # fmt: skip
