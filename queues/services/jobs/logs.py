"""A job's pod logs: from the cluster while the pod is there (followed live if asked), else the
end of the log kept when the pod ended. Read by the job's team and platform admins only (a log
shows what the environment does)."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied, ValidationError

from core.roles import is_platform_admin
from fleet import kube
from queues.models import Job, JobPod
from queues.selectors.tenancy import team_role

MAX_TAIL = 100_000


def job_log_readable(*, user, job: Job) -> bool:
    return is_platform_admin(user) or team_role(user=user, team=job.team) is not None


def job_log(
    *, user, job: Job, pod: str = "", tail: int | None = 500, follow: bool = False,
    follow_async: bool = False,
):  # fmt: skip
    """The pod's log as text, or with follow an iterator of byte chunks (with follow_async, an
    asynchronous one while the pod runs). `pod` defaults to the job's first pod.
    ValidationError (field errors) when there is no such pod or it has not started;
    PermissionDenied for readers outside the team."""
    if not job_log_readable(user=user, job=job):
        raise PermissionDenied("Only the job's team and platform admins read its logs.")
    if tail is not None and not 0 <= tail <= MAX_TAIL:
        raise ValidationError({"tail": f"Give a number of lines from 0 to {MAX_TAIL}."})
    pods = JobPod.objects.filter(job=job).order_by("name")
    row = pods.filter(name=pod).first() if pod else pods.first()
    if row is None:
        raise ValidationError(
            {"pod": f"Job #{job.pk} has no pod {pod!r}." if pod else "The job has no pods yet."}
        )
    if row.finished_at and row.log_tail:
        text = row.log_tail
        if tail is not None:
            lines = text.splitlines(keepends=True)
            text = "".join(lines[-tail:]) if tail else ""
        return iter([text.encode()]) if follow else text
    if job.cluster is None:
        raise ValidationError({"pod": "The job has no cluster to read the log from."})
    try:
        if follow and follow_async:
            # The pod is there and has started (else the errors below, before any stream).
            kube.client_for(job.cluster).pod_log(row.namespace, row.name, tail=0)
            from fleet.kube.aio import pod_log_follow

            return pod_log_follow(job.cluster, row.namespace, row.name, tail=tail)
        return kube.client_for(job.cluster).pod_log(
            row.namespace, row.name, tail=tail, follow=follow
        )
    except kube.PermanentError as exc:
        if exc.status == 404:
            raise ValidationError({"pod": f"Pod {row.name} is gone and no log was kept."}) from exc
        raise ValidationError({"pod": exc.message}) from exc
