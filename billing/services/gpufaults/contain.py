"""Stage 2 of the GPU fault loop: taint the node of a failed GPU, then stop, resubmit, credit
and tell each job it hit (see the package's docstring)."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from billing import dcgm
from billing.models import GpuFault, GpuFaultCredit
from billing.pricing import cents, cost_of
from billing.selectors.prices import price_book_for
from fleet import kube
from fleet.services.node_taints import GPU_FAULT_TAINT_KEY, gpu_fault_taint, node_taint_add
from queues.models import Job, JobPod, Membership
from queues.selectors.protection import checkpoint_latest
from queues.services.audit import audit
from queues.services.jobs.lifecycle import job_transition
from queues.services.jobs.submit import job_resubmit
from queues.services.notifications import email_send_on_commit, job_message, webhook_post_on_commit

log = logging.getLogger(__name__)
F = GpuFault.State
S = Job.State
ACTIVE = (S.SUBMITTED, S.QUEUED, S.ADMITTED, S.RUNNING, S.PREEMPTED)


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


def _lost_seconds(job: Job, fault: GpuFault) -> tuple[int, datetime | None]:
    """GPU-seconds of work the fault lost, and the checkpoint it counts from: what the job's
    pods held until the fault (or until they died of it just before), each from its start or
    from the job's last checkpoint before the fault, whichever is later (the resubmitted job
    resumes from that checkpoint, as after a preemption). The checkpoint is None when none
    saved any of it."""
    at, total = fault.detected_at, 0
    saved = checkpoint_latest(job_id=job.pk, until=at)
    counted_from = None
    for pod in job.pods.filter(started_at__isnull=False, started_at__lt=at).filter(
        Q(finished_at__isnull=True) | Q(finished_at__gte=_crash_window(fault))
    ):
        begin = pod.started_at
        if saved is not None and saved.at > begin:
            begin = counted_from = saved.at
        end = min(pod.finished_at or at, at)
        total += pod.gpus * max(0, int((end - begin).total_seconds()))
    return total, counted_from


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


def gpu_fault_credit_terms(*, job: Job, fault: GpuFault) -> dict:
    """What a fault cost a job, as its credit line says: the GPU-seconds lost (since its last
    checkpoint, if one saved part of the run), that checkpoint's time, the price per hour in
    force when it was detected (None without one) and its currency, and the amount."""
    seconds, checkpoint_at = _lost_seconds(job, fault)
    price = _price(job, fault.detected_at)
    return {
        "gpu_seconds_lost": seconds,
        "checkpoint_at": checkpoint_at,
        "price_per_hour": price.price_per_hour if price else None,
        "currency": price.currency if price else "EUR",
        "amount": cents(cost_of(seconds, price.price_per_hour)) if price else 0,
    }


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
        credit = GpuFaultCredit.objects.create(
            fault=fault, job=job, team=job.team, stopped_at=now,
            **gpu_fault_credit_terms(job=job, fault=fault),
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
                "gpu_seconds": credit.gpu_seconds_lost,
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
