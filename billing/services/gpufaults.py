"""The GPU fault loop: from DCGM's health signals to the job owner and the bill.

The device plugin takes a failed GPU out of what a node offers, but nobody moves the work it
held, keeps new pods off the node or pays back the hours lost. Each beat tick (idempotent: a
worker killed half-way leaves rows the next tick carries on from):

1. Observe (gpu_health_observe): each GPU's last XID, double-bit ECC errors and throttling, per
   cluster, from its exporters or its Prometheus (billing.dcgm). A GPU is
   - failed: an XID in settings.GPU_FAULT_XIDS other than the one an admin accepted when
     returning it, or double-bit ECC errors beyond those accepted;
   - degraded: throttled for heat or power for more than GPU_THROTTLE_DEGRADED_SHARE of the time
     since the previous observation (shown to admins, nothing else is done);
   - else healthy.
   A change of state is a GpuHealthEvent (the history); a GPU that fails opens a GpuFault.
2. Contain (gpu_faults_contain), per open fault:
   - taint its node NoSchedule with the portal's key (fleet.services.node_taints says why a
     taint and not a cordon), so no new pod of the pool lands there;
   - for every job that held the GPU (the exporter's pod labels, and the pods whose GPU UUIDs
     the sync recorded), in one transaction per job: stop it (failed, its objects deleted),
     resubmit it as its owner (the copy keeps its checkpoint volume and path, so it resumes
     from its last checkpoint; one without starts over), and credit its team the GPU-hours
     its pods had held since they started, at the price book's price for the job's GPU model
     at the fault (GpuFaultCredit, the line finance audits); then tell the owner and the
     team's leads (e-mail, the team webhook, a notice on the job page).
3. Return (gpu_node_return_request by a platform admin, then gpu_node_return_finish): the
   taint is removed and the node's GPUs count as healthy again, their current XID and error
   count accepted (the exporter keeps reporting the last XID until the GPU is reset).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from billing import dcgm
from billing.models import GpuFault, GpuFaultCredit, GpuHealth, GpuHealthEvent
from billing.pricing import cents, cost_of
from billing.selectors.prices import price_book_for
from core.roles import is_platform_admin
from fleet import kube
from fleet.models import Cluster
from fleet.services.node_taints import (
    GPU_FAULT_TAINT_KEY,
    gpu_fault_taint,
    node_taint_add,
    node_taint_remove,
)
from queues.models import Job, JobPod, Membership
from queues.services.audit import audit
from queues.services.jobs.lifecycle import job_transition
from queues.services.jobs.submit import job_resubmit
from queues.services.notifications import email_send_on_commit, job_message, webhook_post_on_commit

log = logging.getLogger(__name__)
H = GpuHealth.State
F = GpuFault.State
S = Job.State
ACTIVE = (S.SUBMITTED, S.QUEUED, S.ADMITTED, S.RUNNING, S.PREEMPTED)


# -- 1. observe ----------------------------------------------------------------------------------


def _judge(row: GpuHealth, sample: dcgm.GpuHealthSample, share: dict) -> tuple[str, str]:
    """(state, reason) of a GPU from its latest figures."""
    xid = sample.xid or 0
    if xid in settings.GPU_FAULT_XIDS and xid != row.xid_accepted:
        return H.FAILED, f"XID {xid} reported by the driver"
    dbe = int(sample.ecc_dbe or 0)
    if dbe > row.dbe_accepted:
        return H.FAILED, f"{dbe - row.dbe_accepted} double-bit ECC error(s)"
    limit = float(settings.GPU_THROTTLE_DEGRADED_SHARE)
    hot = [f"{what} {value:.0%} of the time" for what, value in share.items()
           if value is not None and value > limit]  # fmt: skip
    if hot:
        return H.DEGRADED, "throttled: " + ", ".join(hot)
    return H.HEALTHY, ""


def _share(previous_ns: int, now_ns: float | None, seconds: float) -> float | None:
    if now_ns is None or seconds <= 0 or now_ns < previous_ns:
        return None  # a first look, or a counter reset (driver reload): no rate yet
    return min(1.0, (now_ns - previous_ns) / 1e9 / seconds)


def gpu_health_observe(
    *, cluster: Cluster, samples: list[dcgm.GpuHealthSample], at: datetime,
    holders: dict[str, list[list[str]]] | None = None,
) -> list[GpuFault]:  # fmt: skip
    """Record the cluster's GPUs' health at `at`; returns the faults this opened.

    One transaction with the cluster's rows locked, so two runs at once write one history."""
    new_rows, updated, events, failed = [], [], [], []
    with transaction.atomic():
        existing = {
            row.gpu_uuid: row
            for row in GpuHealth.objects.select_for_update().filter(
                cluster=cluster, gpu_uuid__in=[s.gpu_uuid for s in samples]
            )
        }
        for sample in samples:
            row = existing.get(sample.gpu_uuid)
            if row is None:
                row = GpuHealth(cluster=cluster, gpu_uuid=sample.gpu_uuid, observed_at=at,
                                state_since=at)  # fmt: skip
            elif at <= row.observed_at:
                continue  # an older reading than the one recorded
            seconds = (at - row.observed_at).total_seconds() if row.pk else 0
            share = {
                "thermal": _share(row.thermal_violation_ns, sample.thermal_ns, seconds),
                "power": _share(row.power_violation_ns, sample.power_ns, seconds),
            }
            state, reason = _judge(row, sample, share)
            changed = row.pk is None and state != H.HEALTHY or row.pk and state != row.state
            row.node_name, row.gpu_index = sample.node, sample.gpu_index
            row.model_name = sample.model_name[:200]
            row.last_xid = sample.xid or 0
            row.ecc_dbe_total = int(sample.ecc_dbe or 0)
            row.thermal_violation_ns = int(sample.thermal_ns or 0)
            row.power_violation_ns = int(sample.power_ns or 0)
            row.thermal_share, row.power_share = share["thermal"], share["power"]
            row.observed_at = at
            if changed or row.pk is None:
                row.state, row.reason, row.state_since = state, reason, at
            (updated if row.pk else new_rows).append(row)
            if changed:
                events.append(GpuHealthEvent(
                    cluster=cluster, node_name=row.node_name, gpu_uuid=row.gpu_uuid,
                    gpu_index=row.gpu_index, at=at, state=state, reason=reason or "healthy",
                ))  # fmt: skip
            if state == H.FAILED:
                failed.append(row)
        GpuHealth.objects.bulk_create(new_rows)
        # An UPDATE per row (bulk_update's CASE expressions measured 4 s per 1000 rows).
        for row in updated:
            GpuHealth.objects.filter(pk=row.pk).update(**{f: getattr(row, f) for f in _OBSERVED})
        GpuHealthEvent.objects.bulk_create(events)
    opened = []
    for row in failed:
        fault = _open_fault(row, at=at, pods=(holders or {}).get(row.gpu_uuid, []))
        if fault is not None:
            opened.append(fault)
    return opened


_OBSERVED = [
    "node_name", "gpu_index", "model_name", "last_xid", "ecc_dbe_total", "thermal_violation_ns",
    "power_violation_ns", "thermal_share", "power_share", "observed_at", "state", "reason",
    "state_since",
]  # fmt: skip


def _open_fault(row: GpuHealth, *, at: datetime, pods: list) -> GpuFault | None:
    """Open the GPU's fault unless one is open (the constraint decides a race)."""
    if (
        GpuFault.objects.filter(cluster=row.cluster, gpu_uuid=row.gpu_uuid)
        .exclude(state=F.RETURNED)
        .exists()
    ):
        return None
    try:
        with transaction.atomic():
            fault = GpuFault.objects.create(
                cluster=row.cluster, node_name=row.node_name, gpu_uuid=row.gpu_uuid,
                gpu_index=row.gpu_index, model_name=row.model_name, xid=row.last_xid,
                reason=row.reason, detected_at=at, pods=pods,
            )  # fmt: skip
    except IntegrityError:
        return None
    audit(actor=None, verb="gpu.fault", obj=fault,
          message=f"GPU {row.gpu_index} ({row.gpu_uuid}) of node {row.node_name} failed: "
          f"{row.reason}.", after={"node": row.node_name, "gpu": row.gpu_index,
                                   "xid": row.last_xid})  # fmt: skip
    return fault


def gpu_health_read(*, cluster: Cluster, urls: list[str], prometheus: str, at: datetime) -> int:
    """Read a cluster's GPUs' health from its exporters or its Prometheus and observe it;
    returns how many GPUs were seen. An exporter that does not answer costs only its GPUs."""
    samples: list[dcgm.GpuHealthSample] = []
    holders: dict[str, list[list[str]]] = {}
    if prometheus:
        samples = dcgm.prometheus_gpu_health(client=dcgm.Prometheus(base_url=prometheus), at=at)
        for gpu in dcgm.prometheus_recent_utilisation(
            client=dcgm.Prometheus(base_url=prometheus), at=at
        ):
            _hold(holders, gpu.sid)
    for url in urls:
        try:
            samples += dcgm.scrape_health(url)
            for gpu in dcgm.scrape(url):
                _hold(holders, gpu.sid)
        except dcgm.MetricsError as exc:
            log.warning("gpu health: %s: %s", cluster.name, exc)
    gpu_health_observe(cluster=cluster, samples=samples, at=at, holders=holders)
    return len(samples)


def _hold(holders: dict, sid: dcgm.SeriesId) -> None:
    if sid.pod:
        uuid = sid.gpu_uuid.split("/", 1)[0]
        holders.setdefault(uuid, []).append([sid.namespace, sid.pod])


# -- 2. contain ----------------------------------------------------------------------------------


def _taint_value(fault: GpuFault) -> str:
    return f"gpu{fault.gpu_index}-xid{fault.xid}" if fault.xid else f"gpu{fault.gpu_index}-ecc"


def _crash_window(fault: GpuFault) -> datetime:
    """Since when a pod that ended counts as hit: a workload often dies of the XID itself,
    before the exporter is read again (two scrape intervals)."""
    return fault.detected_at - timedelta(seconds=2 * dcgm.scrape_interval())


def _jobs_hit(fault: GpuFault) -> list[int]:
    """Jobs whose pods held the failed GPU when it failed (or ended just before)."""
    named = Q(pk__in=[])
    for namespace, pod in fault.pods or []:
        named |= Q(namespace=namespace, name=pod)
    pods = JobPod.objects.filter(job__cluster_id=fault.cluster_id).filter(
        named | Q(node_name=fault.node_name, gpu_uuids__contains=[fault.gpu_uuid])
    )
    pods = pods.filter(Q(finished_at__isnull=True) | Q(finished_at__gte=_crash_window(fault)))
    return sorted(set(pods.values_list("job_id", flat=True)))


def _lost_seconds(job: Job, fault: GpuFault) -> int:
    """GPU-seconds the job's pods held from their start until the fault (or until they died
    of it just before): the work lost."""
    at, total = fault.detected_at, 0
    for pod in job.pods.filter(started_at__isnull=False, started_at__lt=at).filter(
        Q(finished_at__isnull=True) | Q(finished_at__gte=_crash_window(fault))
    ):
        end = min(pod.finished_at or at, at)
        total += pod.gpus * max(0, int((end - pod.started_at).total_seconds()))
    return total


def _died_of_it(job: Job, fault: GpuFault) -> bool:
    """The job failed of the fault before the portal saw it, and nobody resubmitted it yet."""
    return (
        job.state == S.FAILED
        and job.finished_at is not None
        and job.finished_at >= _crash_window(fault)
        and not Job.objects.filter(resubmitted_from=job).exists()
    )


def _price(job: Job, at: datetime):
    pool = job.admitted_pool or job.pool
    if pool is None:
        return None
    profile = pool.mig_profile if pool.sharing == pool.Sharing.MIG else ""
    book = price_book_for(start=at, end=at + timedelta(seconds=1))
    return book.at(pool.gpu_model_id, profile, at)


def _stop_resubmit_credit(fault: GpuFault, job_id: int, now: datetime) -> GpuFaultCredit | None:
    """Stop, resubmit and credit one job the fault hit (one transaction: all or none)."""
    with transaction.atomic():
        job = (
            Job.objects.select_for_update(of=("self",))
            .select_related("team", "owner", "pool__gpu_model", "admitted_pool__gpu_model")
            .get(pk=job_id)
        )
        credit = GpuFaultCredit.objects.filter(fault=fault, job=job).first()
        if credit is not None:
            return credit
        where = f"GPU {fault.gpu_index} of node {fault.node_name} failed ({fault.reason})"
        was_active = job.state in ACTIVE
        resubmit = was_active or _died_of_it(job, fault)
        if was_active:
            job_transition(
                job_id=job.pk, to_state=S.FAILED, reason=f"Stopped by the portal: {where}.",
                fields={"exit_reason": f"{where}; resubmitted by the portal"[:2000],
                        "pending_reason": "", "cluster_delete_pending": True},
            )  # fmt: skip
            transaction.on_commit(lambda: _enqueue_delete(job.pk))
        seconds = _lost_seconds(job, fault)
        price = _price(job, fault.detected_at)
        amount = cents(cost_of(seconds, price.price_per_hour)) if price else 0
        credit = GpuFaultCredit.objects.create(
            fault=fault, job=job, team=job.team, gpu_seconds_lost=seconds,
            price_per_hour=price.price_per_hour if price else None,
            currency=price.currency if price else "EUR", amount=amount, stopped_at=now,
        )  # fmt: skip
        if resubmit:
            try:
                with transaction.atomic():
                    copy = job_resubmit(job=job, user=job.owner)
                credit.resubmitted_job = copy
            except (ValidationError, PermissionDenied) as exc:
                credit.resubmit_error = "; ".join(getattr(exc, "messages", [str(exc)]))[:2000]
            credit.save(update_fields=["resubmitted_job", "resubmit_error"])
        audit(
            actor=None,
            verb="job.gpu_fault",
            obj=job,
            team=job.team,
            message=f"{where}: job {'stopped' if was_active else 'had failed'}"
            + (
                f", resubmitted as #{credit.resubmitted_job_id}"
                if credit.resubmitted_job_id
                else f", not resubmitted ({credit.resubmit_error or 'it had ended'})"
            )
            + f"; {credit.gpu_seconds_lost / 3600:.2f} GPU-hours credited "
            f"({credit.amount} {credit.currency}).",
            after={
                "fault": fault.pk,
                "credit": credit.pk,
                "gpu_seconds": seconds,
                "amount": str(credit.amount),
                "resubmitted": credit.resubmitted_job_id,
            },
        )
        _tell(credit, where)
        credit.notified_at = now
        credit.save(update_fields=["notified_at"])
    return credit


def _enqueue_delete(job_id: int) -> None:
    from queues.tasks import delete_job

    delete_job.delay(job_id)


def gpu_fault_text(credit: GpuFaultCredit, where: str) -> str:
    job = credit.job
    then = (
        f"It was resubmitted as job #{credit.resubmitted_job_id}"
        + (
            ", which resumes from its checkpoint"
            if job.checkpoint_volume
            else " (it keeps no checkpoint, so it starts over)"
        )  # fmt: skip
        if credit.resubmitted_job_id
        else "It was not resubmitted"
        + (f": {credit.resubmit_error}" if credit.resubmit_error else "")  # fmt: skip
    )
    return (
        f"Job “{job.name}” (#{job.pk}) was hit by a GPU fault: {where}. {then}. "
        f"Your team is credited {credit.gpu_seconds_lost / 3600:.2f} GPU-hours "
        f"({credit.amount} {credit.currency}) on this month's bill."
    )


def _tell(credit: GpuFaultCredit, where: str) -> None:
    job = credit.job
    leads = Membership.objects.filter(team=job.team, role=Membership.Role.LEAD).values_list(
        "user__email", flat=True
    )
    body = f"{gpu_fault_text(credit, where)}\n{job_message(job, S.FAILED)}"
    email_send_on_commit(recipients=[job.owner.email, *leads],
                         subject=f"{job.name}: stopped by a GPU fault", body=body)  # fmt: skip
    webhook_post_on_commit(url=job.team.webhook_url, text=body)


def gpu_fault_contain(*, fault: GpuFault, now: datetime | None = None) -> bool:
    """Taint the fault's node, then stop, resubmit, credit and tell each job it hit; True when
    the fault is contained. Raises kube.KubeError when the cluster does not take the taint."""
    now = now or timezone.now()
    if fault.tainted_at is None:
        node_taint_add(cluster=fault.cluster, node=fault.node_name,
                       taint=gpu_fault_taint(value=_taint_value(fault)))  # fmt: skip
        with transaction.atomic():
            won = GpuFault.objects.filter(pk=fault.pk, tainted_at__isnull=True).update(
                tainted_at=now, last_error=""
            )
            if won:
                audit(
                    actor=None,
                    verb="node.taint",
                    obj=fault,
                    message=f"Node {fault.node_name} tainted {GPU_FAULT_TAINT_KEY}="
                    f"{_taint_value(fault)}:NoSchedule (GPU {fault.gpu_index} failed).",
                )
    for job_id in _jobs_hit(fault):
        _stop_resubmit_credit(fault, job_id, now)
    return bool(
        GpuFault.objects.filter(pk=fault.pk, state=F.OPEN).update(
            state=F.CONTAINED, contained_at=now
        )
    )


def gpu_faults_contain_all(*, now: datetime | None = None) -> dict:
    """Contain every open fault; one cluster's failure does not stop the rest."""
    done = failed = 0
    # A disabled cluster gets no writes (as the job deletions wait): its faults wait too.
    for fault in GpuFault.objects.filter(state=F.OPEN, cluster__enabled=True).select_related(
        "cluster"
    ):
        try:
            done += int(gpu_fault_contain(fault=fault, now=now))
        except kube.KubeError as exc:
            failed += 1
            log.warning("gpu fault %s: %s", fault.pk, exc)
            GpuFault.objects.filter(pk=fault.pk).update(last_error=str(exc)[:2000])
    return {"contained": done, "failed": failed}


# -- 3. return to service ------------------------------------------------------------------------


def gpu_node_return_request(*, cluster: Cluster, node: str, actor, reason: str) -> int:
    """A platform admin returns a node to service: its faults are marked returning (the
    worker removes the taint); returns how many. Raises PermissionDenied, ValidationError."""
    if not is_platform_admin(actor):
        raise PermissionDenied("Only platform admins return a node to service.")
    reason = " ".join((reason or "").split())
    if not reason:
        raise ValidationError({"reason": ["Say why the node can run jobs again (kept in the "
                                          "audit log)."]})  # fmt: skip
    with transaction.atomic():
        faults = list(
            GpuFault.objects.select_for_update().filter(
                cluster=cluster, node_name=node, state__in=[F.OPEN, F.CONTAINED]
            )
        )
        if not faults:
            raise ValidationError({"node": [f"Node {node} has no fault to return from."]})
        for fault in faults:
            fault.state, fault.return_requested_by = F.RETURNING, actor
            fault.return_reason = reason[:2000]
            fault.save(update_fields=["state", "return_requested_by", "return_reason"])
        audit(actor=actor, verb="node.return_to_service", obj=faults[0], message=reason,
              after={"cluster": cluster.name, "node": node,
                     "faults": [f.pk for f in faults]})  # fmt: skip
        transaction.on_commit(_enqueue_return)
    return len(faults)


def _enqueue_return() -> None:
    from billing.tasks import gpu_fault_loop

    gpu_fault_loop.delay()


def gpu_node_return_finish(*, cluster: Cluster, node: str, now: datetime | None = None) -> bool:
    """Remove the taint of a node whose faults are returning and accept its GPUs' figures;
    True when done. Raises kube.KubeError when the cluster does not answer."""
    now = now or timezone.now()
    faults = GpuFault.objects.filter(cluster=cluster, node_name=node, state=F.RETURNING)
    if not faults.exists():
        return False
    node_taint_remove(cluster=cluster, node=node, key=GPU_FAULT_TAINT_KEY)
    with transaction.atomic():
        returning = list(faults.select_for_update())
        if not returning:
            return False
        for row in GpuHealth.objects.select_for_update().filter(cluster=cluster, node_name=node):
            row.xid_accepted, row.dbe_accepted = row.last_xid, row.ecc_dbe_total
            if row.state == H.FAILED:
                row.state, row.reason, row.state_since = H.HEALTHY, "", now
                GpuHealthEvent.objects.create(
                    cluster=cluster, node_name=node, gpu_uuid=row.gpu_uuid,
                    gpu_index=row.gpu_index, at=now, state=H.HEALTHY,
                    reason=f"returned to service by {returning[0].return_requested_by}: "
                    f"{returning[0].return_reason}",
                )  # fmt: skip
            row.save()
        GpuFault.objects.filter(pk__in=[f.pk for f in returning]).update(
            state=F.RETURNED, returned_at=now, last_error=""
        )
        audit(
            actor=returning[0].return_requested_by,
            verb="node.untaint",
            obj=returning[0],
            message=f"Node {node}: taint {GPU_FAULT_TAINT_KEY} removed, back in service.",
        )
    return True


def gpu_nodes_return_all(*, now: datetime | None = None) -> int:
    done = 0
    pairs = GpuFault.objects.filter(state=F.RETURNING, cluster__enabled=True).values_list(
        "cluster_id", "node_name"
    )
    for cluster_id, node in sorted(set(pairs)):
        cluster = Cluster.objects.get(pk=cluster_id)
        try:
            done += int(gpu_node_return_finish(cluster=cluster, node=node, now=now))
        except kube.KubeError as exc:
            log.warning("returning %s/%s: %s", cluster.name, node, exc)
            GpuFault.objects.filter(cluster=cluster, node_name=node, state=F.RETURNING).update(
                last_error=str(exc)[:2000]
            )
    return done
