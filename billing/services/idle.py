"""Idle-GPU accountability: GPUs a running job holds at near-zero utilisation, live.

- Observe (each direct scrape): a running job's GPUs average below its tier's threshold → the
  job is idle since that scrape (kept while it stays below); one scrape at or above clears it,
  and any warning with it.
- Enforce (beat, every minute): idle for the tier's `idle_after_minutes` → the owner and the
  team's leads are told (e-mail, the team webhook, a banner on the job page), once; then, after
  `idle_grace_minutes`, the tier's action: warn only, or suspend the job through Kueue (its
  Workload inactive; the owner resumes it from the job page). Every step is audited.
- Nothing is decided on stale data: a cluster whose exporters were not scraped in the last
  STALE_AFTER is left alone (a stopped exporter is not an idle GPU).

Where a cluster's metrics go through Prometheus (no direct scrape), the same beat tick asks it
for each GPU's utilisation over the last two minutes, with the pod holding it, and observes
that as it would a scrape (idle_watch_prometheus); a cluster whose Prometheus did not answer
lately is left alone, as one whose exporters were not scraped.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from billing import dcgm
from billing.models import IdleWatchState, ScrapeState
from fleet import kube
from fleet.models import Cluster
from queues.models import Job, JobPod, Membership
from queues.services.audit import audit
from queues.services.jobs.idle import job_idle_suspend
from queues.services.notifications import email_send_on_commit, job_message, webhook_post_on_commit

log = logging.getLogger(__name__)
STALE_AFTER = timedelta(minutes=5)
S = Job.State


def idle_observe(*, cluster: Cluster, samples: list[dcgm.GpuSample], scraped_at: datetime) -> int:
    """Record which of the cluster's running jobs are idle in this scrape; returns how many."""
    utils: dict[tuple[str, str], list[float]] = defaultdict(list)
    for sample in samples:
        if sample.sid.pod and sample.util is not None:
            utils[(sample.sid.namespace, sample.sid.pod)].append(sample.util)
    if not utils:
        return 0
    by_job: dict[int, list[float]] = defaultdict(list)
    pods = JobPod.objects.filter(
        job__cluster=cluster, job__state=S.RUNNING, name__in={pod for _, pod in utils}
    ).values_list("job_id", "namespace", "name")
    for job_id, namespace, name in pods:
        by_job[job_id].extend(utils.get((namespace, name), []))
    idle = 0
    jobs = Job.objects.filter(pk__in=list(by_job)).select_related("tier")
    for job in jobs:
        values = by_job[job.pk]
        if not values:
            continue
        mean = sum(values) / len(values)
        below = mean < job.tier.idle_threshold_percent
        update = {"idle_util": round(mean, 1)}
        if below:
            idle += 1
            if job.idle_since is None:
                update["idle_since"] = scraped_at
        elif job.idle_since is not None or job.idle_warned_at is not None:
            update.update(idle_since=None, idle_warned_at=None)
        Job.objects.filter(pk=job.pk, state=S.RUNNING).update(**update)
    return idle


def _fresh_clusters(now: datetime) -> set[int]:
    """Clusters whose exporters were scraped, or Prometheus read, lately (their idle flags are
    current)."""
    latest = ScrapeState.objects.values("cluster_id").annotate(at=Max("last_scrape_at"))
    fresh = {row["cluster_id"] for row in latest if row["at"] and row["at"] >= now - STALE_AFTER}
    watched = IdleWatchState.objects.filter(observed_at__gte=now - STALE_AFTER)
    return fresh | set(watched.values_list("cluster_id", flat=True))


def idle_watch_prometheus(*, cluster: Cluster, url: str, now: datetime | None = None) -> int:
    """Observe a Prometheus-metered cluster's running jobs as a scrape would (idle_observe);
    returns how many are idle. A Prometheus that does not answer is recorded, not raised."""
    now = now or timezone.now()
    try:
        samples = dcgm.prometheus_recent_utilisation(client=dcgm.Prometheus(base_url=url), at=now)
    except dcgm.MetricsError as exc:
        log.warning("idle watch of %s: %s", cluster.name, exc)
        IdleWatchState.objects.update_or_create(
            cluster=cluster, defaults={"last_error": str(exc), "last_error_at": now}
        )
        return 0
    idle = idle_observe(cluster=cluster, samples=samples, scraped_at=now)
    IdleWatchState.objects.update_or_create(
        cluster=cluster, defaults={"observed_at": now, "last_error": ""}
    )
    return idle


def idle_text(job: Job, now: datetime) -> str:
    minutes = int((now - job.idle_since).total_seconds() // 60) if job.idle_since else 0
    return (
        f"its {job.total_gpus} GPU(s) have averaged {job.idle_util or 0:g} % utilisation for "
        f"{minutes} min, below the {job.tier.idle_threshold_percent} % its tier "
        f"{job.tier.name} expects"
    )


def _tell(job: Job, subject: str, text: str) -> None:
    leads = Membership.objects.filter(team=job.team, role=Membership.Role.LEAD).values_list(
        "user__email", flat=True
    )
    body = f"{text}\n{job_message(job, job.state)}"
    email_send_on_commit(recipients=[job.owner.email, *leads], subject=subject, body=body)
    webhook_post_on_commit(url=job.team.webhook_url, text=body)


def _warn(job: Job, now: datetime) -> None:
    tier = job.tier
    what = idle_text(job, now)
    if tier.idle_action == tier.IdleAction.SUSPEND:
        then = f"It will be suspended in {tier.idle_grace_minutes} min unless its GPUs get busy."
    else:
        then = "Please use its GPUs or cancel it, so others can."
    text = f"Job “{job.name}” (#{job.pk}) holds idle GPUs: {what}. {then}"
    with transaction.atomic():
        won = Job.objects.filter(pk=job.pk, idle_warned_at__isnull=True).update(idle_warned_at=now)
        if not won:
            return
        after = {"idle_util": job.idle_util, "idle_since": job.idle_since.isoformat()}
        audit(actor=None, verb="job.idle_warn", obj=job, team=job.team, message=text, after=after)
        _tell(job, f"{job.name}: GPUs idle", text)


def _suspend(job: Job, now: datetime) -> bool:
    what = idle_text(job, now)
    reason = f"Suspended by the idle-GPU policy: {what}."
    try:
        job_idle_suspend(job=job, reason=reason)
    except kube.KubeError as exc:  # the next minute tries again
        log.warning("could not suspend idle job %s: %s", job.pk, exc)
        return False
    with transaction.atomic():
        _tell(job, f"{job.name}: suspended (GPUs idle)",
              f"{reason} Resume it from the job page when it will use its GPUs.")  # fmt: skip
    return True


def idle_enforce(*, now: datetime | None = None) -> dict:
    """Warn about and act on the idle jobs whose time has come (see the module docstring)."""
    now = now or timezone.now()
    fresh = _fresh_clusters(now)
    warned = suspended = 0
    candidates = Job.objects.filter(
        state=S.RUNNING, idle_since__isnull=False, idle_suspended_at__isnull=True,
        cluster_id__in=fresh,
    ).select_related("tier", "team", "owner", "cluster")  # fmt: skip
    for job in candidates:
        tier = job.tier
        if job.idle_warned_at is None:
            if now - job.idle_since >= timedelta(minutes=tier.idle_after_minutes):
                _warn(job, now)
                warned += 1
            continue
        if tier.idle_action != tier.IdleAction.SUSPEND:
            continue
        if now - job.idle_warned_at >= timedelta(minutes=tier.idle_grace_minutes):
            suspended += int(_suspend(job, now))
    return {"warned": warned, "suspended": suspended}
