"""Job notifications: an e-mail to the owner and a Slack-compatible post to the team webhook.
Called from a Celery task only, never inside a web request."""

import json
import logging
import urllib.error
import urllib.request

from django.conf import settings
from django.core.mail import send_mail
from django.urls import reverse

from queues.models import Job, Membership

log = logging.getLogger(__name__)
WEBHOOK_TIMEOUT = 5


class NotifyError(Exception):
    """A webhook that did not answer; worth trying again later."""


def job_message(job: Job, state: str) -> str:
    """One line a person understands, with a link to the job."""
    url = settings.PORTAL_URL.rstrip("/") + reverse("job-detail", args=[job.pk])
    label = Job.State(state).label.lower() if state in Job.State.values else state
    text = f"Job “{job.name}” (#{job.pk}) of team {job.team.name} is {label}"
    if state == Job.State.SUBMITTED and job.approved_by_id:
        text = f"Job “{job.name}” (#{job.pk}) of team {job.team.name} was approved and submitted"
    detail = {
        Job.State.FAILED: job.exit_reason,
        Job.State.PREEMPTED: job.preemption_reason,
        Job.State.PENDING_APPROVAL: job.pending_reason,
        Job.State.REJECTED: job.exit_reason,
    }.get(state, "")
    if detail:
        text += f": {detail}"
    return f"{text} {url}"


def job_notify(*, job_id: int, state: str) -> None:
    """Tell the owner (and, for jobs waiting on approval, the team's leads) and the webhook."""
    job = Job.objects.select_related("team", "owner").get(pk=job_id)
    text = job_message(job, state)
    recipients = [job.owner.email] if job.owner.email else []
    if state == Job.State.PENDING_APPROVAL:
        recipients += list(
            Membership.objects.filter(team=job.team, role=Membership.Role.LEAD)
            .exclude(user__email="")
            .values_list("user__email", flat=True)
        )
    if recipients:
        send_mail(
            subject=f"[Quartermaster] {job.name}: {state.replace('_', ' ')}",
            message=text,
            from_email=settings.DEFAULT_FROM_EMAIL,
            recipient_list=sorted(set(recipients)),
            fail_silently=True,
        )
    if job.team.webhook_url:
        webhook_post(url=job.team.webhook_url, text=text)


def webhook_post(*, url: str, text: str) -> None:
    """POST {"text": ...} as JSON; 5xx and connection errors raise NotifyError (retry)."""
    body = json.dumps({"text": text}).encode()
    request = urllib.request.Request(
        url, data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=WEBHOOK_TIMEOUT) as response:
            response.read()
    except urllib.error.HTTPError as exc:
        if exc.code >= 500 or exc.code == 429:
            raise NotifyError(f"webhook answered {exc.code}") from exc
        log.warning("webhook %s refused the message: %s", url, exc.code)
    except (urllib.error.URLError, OSError) as exc:
        raise NotifyError(f"webhook unreachable: {exc}") from exc
