"""The demo's job history: the jobs the demo teams submitted since the start of last month, run
through Kueue's rules as kubesim's controllers run them (kueuemodel's replay on a simulated
clock, with today's quotas, tiers, fair sharing and member queues, on the demo fleet's nodes), and
recorded as the status sync records a cluster's jobs: their states and timeline, their pods
(with the nodes and GPUs they held, failures, retries, preemptions), and their waits.

So the history is one the demo cluster could have made: a what-if that replays today's
configuration over it gives back what happened. It has what real histories have: jobs that
fail (some cured by a retry), jobs cancelled while waiting or running, jobs preempted by a
higher tier or by a team reclaiming the quota it lent (those with a checkpoint resume), and
jobs still running or waiting when any window into it opens. Arrivals follow the working day
and the week, so queues build up in the afternoon and drain at night.

The history ends before `now` with every job finished (the demo's kubesim starts empty); its
jobs are marked by an idempotency key starting HISTORY_KEY, so seeding it twice adds nothing.
"""

from __future__ import annotations

import math
import random
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.db import connection, transaction
from django.utils import timezone

from demo.fleet import CLUSTER_NAME, NODES
from fleet.models import Cluster, NodePool
from kueuemodel.replay import PodTrace, ReplayJob, replay
from planning.services.whatif import member_fair_sharing_config, replay_queues
from queues.manifests.jobs import job_k8s_name
from queues.manifests.quotas import local_queue_name, member_queue_name
from queues.models import Job, JobPod, JobTransition, Membership, PriorityTier, Quota, Team

HISTORY_KEY = "demo-history-"
SEED = 34
# No job is submitted in the last hours before the seed (a quiet night), so that the history
# has drained when the demo's kubesim starts empty; every job has ended by `now - MARGIN`.
QUIET_HOURS = 18
# The history's length: it reaches back past the start of last month on any day (at most 62
# days before now), so last month's report is whole. Its working days and hours follow this
# Monday's calendar, and the whole history is then moved to end just before now.
HISTORY_DAYS = 63
PLAN_CALENDAR = datetime(2026, 1, 5, tzinfo=UTC)
MARGIN = timedelta(minutes=10)

# team: [(pool, jobs a day, [(weight, workers, GPUs per worker)], mean hours of a run)]
DEMAND = {
    "vision": [
        ("a100", 12, [(5, 1, 1), (3, 1, 2), (3, 1, 4), (1, 1, 8), (1, 2, 4)], 4.0),
        ("l4", 16, [(1, 1, 1)], 3.0),
        ("l4-spot", 6, [(1, 1, 1), (1, 1, 2)], 2.0),
    ],
    "nlp": [
        ("a100", 3, [(3, 1, 8), (1, 1, 4)], 6.0),
        ("h100", 3, [(2, 1, 2), (2, 1, 4)], 5.0),
    ],
    "speech": [
        ("a100", 12, [(2, 1, 1), (1, 1, 2)], 3.0),
        ("l4", 20, [(1, 1, 1)], 3.0),
    ],
    "recsys": [
        ("h100", 8, [(2, 1, 1), (1, 1, 2)], 3.0),
        ("l4", 20, [(1, 1, 1)], 3.0),
    ],
    "robotics": [
        ("a100", 14, [(2, 1, 1), (2, 1, 2), (1, 1, 4)], 2.5),
        ("l4", 16, [(1, 1, 1)], 2.0),
        ("l4-spot", 4, [(1, 1, 1)], 3.0),
    ],
}
# Arrivals per hour of the day (UTC), relative; weekends have a third of them.
HOURLY = [0.3] * 8 + [1.0] * 4 + [1.3] * 6 + [0.8] * 4 + [0.4] * 2
WEEKEND = 0.35
TIERS = [(0.12, "development"), (0.73, "experiment"), (0.15, "experiment-high")]
# What the teams train, for job names, and their images.
WORK = {
    "vision": (["detr-coco", "vit-b16-pretrain", "resnet50-finetune", "segformer-ade"],
               "registry.example.org/vision/train:2.3"),
    "nlp": (["llama-7b-sft", "bert-mlm", "t5-summarise", "tokenizer-eval"],
            "registry.example.org/nlp/train:1.8"),
    "speech": (["whisper-small-ft", "conformer-ctc", "tts-vits"],
               "registry.example.org/speech/train:0.9"),
    "recsys": (["dlrm-train", "two-tower-retrieval", "ranker-eval"],
               "registry.example.org/recsys/train:4.1"),
    "robotics": (["ppo-manipulation", "sim2real-policy", "diffusion-policy"],
                 "registry.example.org/robotics/train:0.4"),
}  # fmt: skip
# Mean GPU utilisation of each team's jobs, percent.
UTILISATION = {"vision": 74, "nlp": 86, "speech": 62, "recsys": 48, "robotics": 57}
FAIL_SHARE = 0.07
CANCEL_SHARE = 0.02
RETRY_SHARE = 0.3
EXIT_CODES = [1, 1, 1, 137, 139, 2]
CHECKPOINT_VOLUME = "checkpoints"
CHECKPOINT_PATH = "/checkpoints"


@dataclass
class Planned:
    """A job of the history before it is run: who, what, when and how it goes."""

    team: str
    pool: str
    owner: object
    name: str
    workers: int
    gpus: int
    tier: str
    submit: int  # seconds from the history's origin (as Kueue saw it: created in the cluster)
    attempts: list[tuple[int, int]]  # (seconds, exit code) of each attempt of its last run
    retry_limit: int = 0
    cancel: int | None = None
    checkpointed: bool = False
    interruptible: bool = False
    job: Job | None = None
    replayed: ReplayJob | None = None


@dataclass
class Heard:
    """What the replay told of one job: its admissions, evictions and pods."""

    admissions: list[float] = field(default_factory=list)
    evictions: list[tuple[float, str]] = field(default_factory=list)
    pods: list[list] = field(default_factory=list)  # [node, GPU indices, start, stop, why]


class Recorder(PodTrace):
    """Hears the replay's pods and gives each the lowest free GPUs of its node, as kubesim's
    scheduler does."""

    def __init__(self, pools: dict[str, list[int]]):
        self.free = {p: [set(range(n)) for n in nodes] for p, nodes in pools.items()}
        self.heard: dict[str, Heard] = defaultdict(Heard)
        self.open: dict[str, list[list]] = defaultdict(list)

    def job_admitted(self, job, t):
        self.heard[job.key].admissions.append(t)

    def job_preempted(self, job, t, reason):
        self.heard[job.key].evictions.append((t, reason))

    def pod_started(self, job, node, t):
        free = self.free[job.pool][node]
        gpus = sorted(free)[: job.gpus_per_worker]
        free.difference_update(gpus)
        pod = [node, gpus, t, None, ""]
        self.heard[job.key].pods.append(pod)
        self.open[job.key].append(pod)

    def pod_stopped(self, job, node, t, why):
        pod = next(p for p in self.open[job.key] if p[0] == node)
        self.open[job.key].remove(pod)
        pod[3], pod[4] = t, why
        self.free[job.pool][node].update(pod[1])


def _weighted(rng: random.Random, table):
    """A row of `table`, each as likely as its first item (its weight) says."""
    roll = rng.random() * sum(row[0] for row in table)
    for row in table:
        roll -= row[0]
        if roll < 0:
            return row
    return table[-1]


def _arrivals(rng: random.Random, *, origin: datetime, seconds: int, per_day: float) -> list[int]:
    """Submission offsets over `seconds` from `origin`: a Poisson process whose rate follows
    the working day (HOURLY) and the week (WEEKEND), `per_day` on an average weekday."""
    mean = sum(HOURLY) / 24
    out = []
    for hour in range(seconds // 3600):
        at = origin + timedelta(hours=hour)
        rate = per_day / 24 * HOURLY[at.hour] / mean * (WEEKEND if at.weekday() >= 5 else 1.0)
        t = 0.0
        while True:
            t += rng.expovariate(rate) if rate > 0 else 3600.0
            if t >= 1.0:
                break
            out.append(hour * 3600 + int(t * 3600))
    return out


def _runtime(rng: random.Random, hours: float) -> int:
    """A run time around `hours` (log-normal), from ten minutes to a day, in whole minutes."""
    seconds = rng.lognormvariate(math.log(hours * 3600) - 0.4, 0.9)
    return int(min(86400, max(600, seconds)) // 60 * 60)


def plan(*, origin: datetime, seconds: int, members: dict[str, list]) -> list[Planned]:
    """The history's jobs, drawn from DEMAND with a fixed seed (the same every time)."""
    rng = random.Random(SEED)
    out = []
    for team, rows in DEMAND.items():
        names, _ = WORK[team]
        for pool, per_day, sizes, hours in rows:
            for submit in _arrivals(rng, origin=origin, seconds=seconds, per_day=per_day):
                _, workers, gpus = _weighted(rng, sizes)
                run = _runtime(rng, hours)
                spot = pool.endswith("-spot")
                checkpointed = (spot and rng.random() < 0.7) or (gpus == 8 and rng.random() < 0.5)
                job = Planned(
                    team=team, pool=pool, owner=rng.choice(members[team]),
                    name=f"{rng.choice(names)}-{len(out) % 1000:03d}", workers=workers,
                    gpus=gpus, tier=_weighted(rng, TIERS)[1], submit=submit,
                    attempts=[(run, 0)], checkpointed=checkpointed, interruptible=spot,
                )  # fmt: skip
                if rng.random() < RETRY_SHARE:
                    job.retry_limit = 2
                if workers == 1 and not checkpointed and rng.random() < FAIL_SHARE:
                    job.attempts = _failing(rng, run, job.retry_limit)
                elif rng.random() < CANCEL_SHARE:
                    job.cancel = submit + rng.randint(600, 4 * 3600)
                out.append(job)
    out.sort(key=lambda j: (j.submit, j.team, j.name))
    return out


def _failing(rng: random.Random, run: int, retry_limit: int) -> list[tuple[int, int]]:
    """The attempts of a job that fails: each fails part of the way with the same exit code;
    a flaky one (a retry cures it) succeeds on its second attempt."""
    code = rng.choice(EXIT_CODES)
    first = int(run * rng.uniform(0.05, 0.6)) // 60 * 60 + 60
    if retry_limit and rng.random() < 0.6:
        return [(first, code), (run, 0)]
    return [(first, code)] + [
        (int(run * rng.uniform(0.05, 0.6)) // 60 * 60 + 60, code) for _ in range(retry_limit)
    ]


def _pool_nodes(pools) -> dict[str, list[int]]:
    """Each pool's nodes as the replay takes them (units per node, in name order)."""
    return {p.name: [NODES[p.name][1]] * NODES[p.name][0] if p.name in NODES else []
            for p in pools}  # fmt: skip


@transaction.atomic
def seed_history(*, now: datetime | None = None) -> dict:
    """Make, run and record the demo's history of the last nine weeks; nothing when
    it exists or the demo is not seeded."""
    if Job.objects.filter(idempotency_key__startswith=HISTORY_KEY).exists():
        return {"jobs": 0}
    cluster = Cluster.objects.filter(name=CLUSTER_NAME).first()
    teams = {t.slug: t for t in Team.objects.filter(slug__in=DEMAND)}
    tiers = {t.name: t for t in PriorityTier.objects.all()}
    members: dict[str, list] = defaultdict(list)
    for m in Membership.objects.filter(team__in=teams.values()).select_related("user", "team"):
        members[m.team.slug].append(m.user)
    if cluster is None or len(teams) < len(DEMAND) or not all(n in tiers for _, n in TIERS):
        return {"jobs": 0}
    now = (now or timezone.now()).replace(microsecond=0)
    # The same history whenever it is seeded (its length and calendar fixed), so that the
    # what-if's window, the last 30 days, always cuts it at the same place: where it cuts
    # decides which jobs are carried over into the window, and so how well the replay agrees.
    seconds = HISTORY_DAYS * 86400 - QUIET_HOURS * 3600
    planned = plan(origin=PLAN_CALENDAR, seconds=seconds, members=members)
    pools = {p.name: p for p in NodePool.objects.filter(cluster=cluster)}
    _create_jobs(
        planned, teams=teams, tiers=tiers, pools=pools, cluster=cluster, origin=PLAN_CALENDAR
    )
    recorder = _run(planned, cluster=cluster, pools=pools)
    ended = max(p.replayed.ended for p in planned)
    # Shift the whole history so that its last job ended just before now (the replay does not
    # depend on when it started: it is the same history, a little earlier or later).
    origin = now - MARGIN - timedelta(seconds=ended)
    _record(planned, recorder, origin=origin, pools=pools)
    return {"jobs": len(planned), "origin": origin, "recorder": recorder, "planned": planned}


def _create_jobs(planned, *, teams, tiers, pools, cluster, origin) -> None:
    """Insert the jobs (as submitted, times set once they ran), so that each has its id and
    its name in the cluster, which the replay orders same-second pods by."""
    rows = []
    for n, p in enumerate(planned):
        team = teams[p.team]
        run = sum(seconds for seconds, _ in p.attempts)
        expected = max(600, int(p.attempts[-1][0] * random.Random(n).uniform(0.8, 1.6)) // 300
                       * 300)  # fmt: skip
        max_runtime = math.ceil(max(2 * expected, run + 3600) / 3600) * 3600
        volumes = ([{"volume": CHECKPOINT_VOLUME, "mount_path": CHECKPOINT_PATH,
                     "read_only": False}] if p.checkpointed else [])  # fmt: skip
        rows.append(Job(
            team=team, owner=p.owner, name=p.name, image=WORK[p.team][1],
            command=["torchrun", "train.py"], args=["--config", f"configs/{p.name[:-4]}.yaml"],
            workers=p.workers, gpus_per_worker=p.gpus, pool=pools[p.pool],
            admitted_pool=pools[p.pool], cluster=cluster, tier=tiers[p.tier],
            max_runtime_seconds=max_runtime, expected_runtime_seconds=expected,
            retry_limit=p.retry_limit, interruptible=p.interruptible, volumes=volumes,
            checkpoint_volume=CHECKPOINT_VOLUME if p.checkpointed else "",
            checkpoint_path=CHECKPOINT_PATH if p.checkpointed else "",
            state=Job.State.SUBMITTED, idempotency_key=f"{HISTORY_KEY}{n}",
            desired_generation=1, applied_generation=1,
        ))  # fmt: skip
    Job.objects.bulk_create(rows, batch_size=1000)
    for p, job in zip(planned, rows, strict=True):
        job.k8s_name = job_k8s_name(name=job.name, job_id=job.pk)
        p.job = job


def _run(planned, *, cluster, pools) -> Recorder:
    """Run the jobs through Kueue's rules with today's configuration (as the demo cluster,
    with fair sharing on, runs it) and hear what happened to each."""
    quotas = {(q.team_id, q.pool_id): (q.nominal_gpus, q.borrowing_limit, q.lending_limit)
              for q in Quota.objects.filter(pool__cluster=cluster)}  # fmt: skip
    queues, sharing = replay_queues(cluster=cluster, quotas=quotas,
                                    jobs=[p.job for p in planned])  # fmt: skip
    nodes = _pool_nodes(pools.values())
    for p in planned:
        job = p.job
        queue = (member_queue_name(job.team, job.owner) if job.team_id in sharing
                 else local_queue_name(job.team))  # fmt: skip
        job.local_queue = queue
        p.replayed = ReplayJob(
            key=f"j{job.pk}", namespace=job.team.namespace, queue=queue, pool=p.pool,
            resource=pools[p.pool].gpu_resource, workers=p.workers, gpus_per_worker=p.gpus,
            priority=job.tier.value, submit=float(p.submit),
            runtime=float(sum(seconds for seconds, _ in p.attempts)),
            cancel=None if p.cancel is None else float(p.cancel),
            checkpointed=p.checkpointed, name=job.k8s_name,
        )  # fmt: skip
    recorder = Recorder(nodes)
    replay(
        **queues, pools=nodes, jobs=[p.replayed for p in planned],
        horizon=float(max(p.submit for p in planned) + 40 * 86400),
        fair_sharing=True,
        admission_fair_sharing=member_fair_sharing_config() if sharing else None,
        trace=recorder,
    )  # fmt: skip
    return recorder


def gpu_uuid(node: str, index: int) -> str:
    """A made-up UUID for a GPU of the demo's history (the live GPUs' come from DCGM)."""
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_OID, f"quartermaster-demo/{node}/{index}"))


def _record(planned, recorder: Recorder, *, origin: datetime, pools) -> None:
    """Write what the replay heard as the status sync writes a cluster's jobs."""
    S = Job.State

    def at(t: float) -> datetime:
        return origin + timedelta(seconds=t)

    jobs, pods, transitions = [], [], []
    for p in planned:
        job, r, heard = p.job, p.replayed, recorder.heard[p.replayed.key]
        job.queued_at = at(r.submit)
        job.submitted_at = job.created_at = job.queued_at - timedelta(seconds=2)
        steps = [(S.DRAFT, S.SUBMITTED, job.submitted_at, "Submitted."),
                 (S.SUBMITTED, S.QUEUED, job.queued_at, "Created in the cluster.")]  # fmt: skip
        job_pods = _pods(p, heard, at)
        state = S.QUEUED
        for k, admitted in enumerate(heard.admissions):
            run_pods = [q for q in job_pods if q.admission == k]
            steps.append((state, S.ADMITTED, at(admitted), f"Admitted in pool {p.pool}."))
            state = S.ADMITTED
            if run_pods:
                steps.append((state, S.RUNNING, min(q.started_at for q in run_pods),
                              "Pods are running."))  # fmt: skip
                state = S.RUNNING
            for q in run_pods:
                if q.phase == "Failed" and q.retried:
                    steps.append((state, state, q.finished_at,
                                  f"A worker failed (exit code {q.exit_code}); the cluster runs "
                                  f"it again (retry {q.retried} of {p.retry_limit})."))  # fmt: skip
            if k < len(heard.evictions):
                when, reason = heard.evictions[k]
                text = PREEMPTED.get(reason, PREEMPTED[""])
                steps.append((state, S.PREEMPTED, at(when), text))
                steps.append((S.PREEMPTED, S.QUEUED, at(when), "Waiting for admission."))
                job.preemption_reason = text
                state = S.QUEUED
        job.finished_at = at(r.ended)
        if p.cancel is not None and r.ended == r.cancel:
            job.state = S.CANCELLED
            steps.append((state, S.CANCELLED, job.finished_at,
                          f"Cancelled by {p.owner.username}."))  # fmt: skip
        elif p.attempts[-1][1]:
            job.state = S.FAILED
            last = job_pods[-1]
            job.exit_reason = (f"Worker {last.name} exited with code {last.exit_code} (Error)."
                               + (f" It had been run again {p.retry_limit} time"
                                  f"{'s' if p.retry_limit != 1 else ''}, the job's retry limit."
                                  if p.retry_limit else ""))  # fmt: skip
            steps.append((state, S.FAILED, job.finished_at, job.exit_reason))
        else:
            job.state = S.SUCCEEDED
            steps.append((state, S.SUCCEEDED, job.finished_at,
                          "All workers finished successfully."))  # fmt: skip
        job.admitted_at = at(heard.admissions[0]) if heard.admissions else None
        job.started_at = min((q.started_at for q in job_pods), default=None)
        job.retries = sum(1 for q in job_pods if q.retried)
        job.preemptions = min(len(heard.evictions), len(heard.admissions))
        jobs.append(job)
        pods += job_pods
        transitions += [JobTransition(job=job, from_state=a, to_state=b, at=when, reason=why)
                        for a, b, when, why in steps]  # fmt: skip
    update_many(jobs, ["created_at", "submitted_at", "queued_at", "admitted_at", "started_at",
                       "finished_at", "state", "k8s_name", "local_queue", "retries",
                       "preemptions", "exit_reason", "preemption_reason"])  # fmt: skip
    JobPod.objects.bulk_create(pods, batch_size=2000)
    JobTransition.objects.bulk_create(transitions, batch_size=2000)


# Kueue's preemption reasons, as the status sync words them (queues.backends.kueue).
PREEMPTED = {
    "InClusterQueue": "Preempted: a higher-priority job of your own team needed the GPUs.",
    "InCohortReclamation": "Preempted: another team of the department reclaimed the GPUs it lent.",
    "InCohortReclaimWhileBorrowing": "Preempted: another team reclaimed quota while you were "
    "borrowing.",
    "InCohortFairSharing": "Preempted: your team borrowed more than its fair share of the "
    "department's idle GPUs.",
    "": "Preempted by Kueue.",
}


def _pods(p: Planned, heard: Heard, at) -> list[JobPod]:
    """The job's pods as the status sync records them: a pod stopped by a preemption or a
    cancellation Deleted when it stopped; in the run that ended the job, each failed attempt a
    Failed pod followed by the next (the job's failing runs are single-worker ones)."""
    job = p.job
    out = []
    evictions = [t for t, _ in heard.evictions]
    for n, (node, gpus, start, stop, why) in enumerate(heard.pods):
        if stop <= start:
            continue  # bound, and deleted by a preemption before the kubelet started it
        node_name = f"{p.pool}-node-{node}"
        segments = [(start, stop, "Deleted", None)]
        if why == "succeeded":
            segments, t = [], start
            for seconds, code in p.attempts if p.workers == 1 else [(stop - start, 0)]:
                segments.append((t, t + seconds, "Failed" if code else "Succeeded", code))
                t += seconds
            segments[-1] = (*segments[-1][:1], stop, *segments[-1][2:])
        for k, (begin, end, phase, code) in enumerate(segments):
            pod = JobPod(
                job=job, name=f"{job.k8s_name}-{n % p.workers}-{_suffix(job.pk, n, k)}",
                namespace=job.team.namespace, node_name=node_name, gpus=p.gpus,
                gpu_uuids=[gpu_uuid(node_name, g) for g in gpus], phase=phase, exit_code=code,
                started_at=at(begin), finished_at=at(end),
            )  # fmt: skip
            pod.admission = sum(1 for t in evictions if t <= start)
            pod.retried = k + 1 if phase == "Failed" and k < len(segments) - 1 else 0
            out.append(pod)
    return out


def update_many(objs: list, names: list[str]) -> None:
    """UPDATE the rows' `names` columns with one prepared statement (bulk_update's CASE per
    row takes most of a minute for the history's jobs)."""
    if not objs:
        return
    model = type(objs[0])
    fields = [model._meta.get_field(name) for name in names]
    quote = connection.ops.quote_name
    sql = (f"UPDATE {quote(model._meta.db_table)} SET "
           + ", ".join(f"{quote(f.column)} = %s" for f in fields)
           + f" WHERE {quote(model._meta.pk.column)} = %s")  # fmt: skip
    values = [[f.get_db_prep_save(getattr(obj, f.attname), connection) for f in fields]
              + [obj.pk] for obj in objs]  # fmt: skip
    with connection.cursor() as cursor:
        for i in range(0, len(values), 5000):
            cursor.executemany(sql, values[i : i + 5000])


def _suffix(*parts) -> str:
    rng = random.Random("/".join(map(str, parts)))
    return "".join(rng.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
