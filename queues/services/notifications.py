"""Notifications: e-mail and Slack-compatible team webhooks, each channel sent by its own Celery
task once the transaction commits, so a failing webhook never re-sends an e-mail and a mail
server that is down never undoes or delays the work that wanted to tell someone."""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from urllib.parse import urlsplit

from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.urls import reverse

from queues.models import Job, Membership

log = logging.getLogger(__name__)
WEBHOOK_TIMEOUT = 5
SUBJECT_PREFIX = "[Quartermaster] "


class NotifyError(Exception):
    """A channel that did not take the message now; worth trying again later."""


# -- sending, after commit ---------------------------------------------------------------------


def email_send_on_commit(*, recipients, subject: str, body: str) -> None:
    """E-mail these addresses (blank ones dropped) once the current transaction commits."""
    # The tasks import this module: import them when sending (the documented on_commit enqueue).
    from queues.tasks import send_email

    addresses = sorted({address for address in recipients if address})
    if addresses:
        transaction.on_commit(lambda: send_email.delay(addresses, subject, body))


def webhook_post_on_commit(*, url: str, text: str) -> None:
    """Post {"text": ...} to a team webhook once the current transaction commits."""
    from queues.tasks import post_webhook

    if url:
        transaction.on_commit(lambda: post_webhook.delay(url, text))


# -- the channels (run by their tasks) ---------------------------------------------------------


def email_send(*, recipients: list[str], subject: str, body: str) -> None:
    """Send one e-mail now. A subject is one header line: line breaks (a job named with a
    newline, say) would make Django refuse the whole message, so they become spaces."""
    line = " ".join(f"{SUBJECT_PREFIX}{subject}".split())
    try:
        send_mail(line, body, settings.DEFAULT_FROM_EMAIL, recipients, fail_silently=False)
    except OSError as exc:  # smtplib's errors are OSErrors: the server is down or refused
        raise NotifyError(f"mail not sent: {exc}") from exc


def webhook_post(*, url: str, text: str) -> None:
    """POST {"text": ...} as JSON; 5xx, 429 and connection errors raise NotifyError (retry)."""
    if urlsplit(url).scheme not in ("http", "https"):
        # urllib would read a file:// URL or speak FTP; the model refuses such a URL, and one
        # already stored is never opened (a permanent error, not retried).
        raise ValueError(f"The webhook URL {url[:200]!r} is not http(s); nothing was sent.")
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


# -- what is said about jobs -------------------------------------------------------------------


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
    """Tell the owner (and, for jobs waiting on approval, the team's leads) and the team's
    webhook about a job's new state: one e-mail task and one webhook task."""
    job = Job.objects.select_related("team", "owner").get(pk=job_id)
    text = job_message(job, state)
    recipients = [job.owner.email]
    if state == Job.State.PENDING_APPROVAL:
        recipients += list(
            Membership.objects.filter(team=job.team, role=Membership.Role.LEAD).values_list(
                "user__email", flat=True
            )
        )
    email_send_on_commit(
        recipients=recipients, subject=f"{job.name}: {state.replace('_', ' ')}", body=text
    )
    webhook_post_on_commit(url=job.team.webhook_url, text=text)
