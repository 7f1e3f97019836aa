"""Notifications: e-mail to the owner (and leads for held jobs), Slack-style JSON to the webhook."""

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from celery.exceptions import Retry
from django.core import mail

from queues import tasks
from queues.models import ApprovalPolicy
from queues.services.jobs.lifecycle import job_transition
from queues.services.notifications import job_notify
from tests.queues.builders import run_tasks_eagerly, submit


@pytest.fixture
def webhook():
    """A local HTTP server on a free port that records JSON bodies; .status sets the answer."""
    received = []

    class Handler(BaseHTTPRequestHandler):
        status = 200

        def do_POST(self):
            length = int(self.headers["Content-Length"])
            received.append(json.loads(self.rfile.read(length)))
            self.send_response(Handler.status)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield type(
        "Hook",
        (),
        {"url": f"http://127.0.0.1:{server.server_port}/hook", "received": received,
         "handler": Handler},
    )  # fmt: skip
    server.shutdown()
    server.server_close()


def test_failure_mails_the_owner_and_posts_to_the_team_webhook(
    jw, webhook, monkeypatch, django_capture_on_commit_callbacks
):
    run_tasks_eagerly(monkeypatch)
    jw["vision"].webhook_url = webhook.url
    jw["vision"].save()
    job = submit(jw, name="resnet")
    job_transition(
        job_id=job.pk, to_state="failed", fields={"exit_reason": "Worker w-0 exited with code 3."}
    )
    with django_capture_on_commit_callbacks(execute=True):
        job_notify(job_id=job.pk, state="failed")
    assert len(mail.outbox) == 1
    assert mail.outbox[0].to == ["alice@example.org"]
    assert mail.outbox[0].subject == "[Quartermaster] resnet: failed"
    assert "exited with code 3" in mail.outbox[0].body
    (body,) = webhook.received
    assert set(body) == {"text"}
    assert "resnet" in body["text"] and "failed" in body["text"]
    assert f"/jobs/{job.pk}/" in body["text"]


def test_held_job_mails_the_leads_too(jw, monkeypatch, django_capture_on_commit_callbacks):
    run_tasks_eagerly(monkeypatch)
    ApprovalPolicy.objects.create(max_gpus_without_approval=1)
    job = submit(jw)
    with django_capture_on_commit_callbacks(execute=True):
        job_notify(job_id=job.pk, state="pending_approval")
    assert sorted(mail.outbox[0].to) == ["alice@example.org", "bob@example.org"]


def test_a_failing_webhook_is_retried_alone(
    jw, webhook, monkeypatch, django_capture_on_commit_callbacks
):
    """Each channel is its own task: the webhook's retries never send the e-mail again."""
    run_tasks_eagerly(monkeypatch)
    webhook.handler.status = 503
    jw["vision"].webhook_url = webhook.url
    jw["vision"].save()
    job = submit(jw)
    with pytest.raises(Retry), django_capture_on_commit_callbacks(execute=True):
        job_notify(job_id=job.pk, state="running")
    assert len(webhook.received) == 1 and len(mail.outbox) == 1
    # The retry Celery scheduled posts again, and only posts.
    with pytest.raises(Retry):
        tasks.post_webhook.apply(args=[webhook.url, webhook.received[0]["text"]], throw=True)
    assert len(webhook.received) == 2 and len(mail.outbox) == 1


def test_a_job_name_with_a_line_break_still_mails(
    jw, monkeypatch, django_capture_on_commit_callbacks
):
    run_tasks_eagerly(monkeypatch)
    job = submit(jw, name="first line\nsecond line")
    with django_capture_on_commit_callbacks(execute=True):
        job_notify(job_id=job.pk, state="running")
    (message,) = mail.outbox
    assert message.subject == "[Quartermaster] first line second line: running"


def test_a_mail_server_that_is_down_is_retried(jw, monkeypatch, django_capture_on_commit_callbacks):
    run_tasks_eagerly(monkeypatch)
    calls = []

    def refuse(*args, **kwargs):
        calls.append(args)
        raise ConnectionRefusedError("no SMTP server")

    monkeypatch.setattr("queues.services.notifications.send_mail", refuse)
    job = submit(jw)
    with pytest.raises(Retry), django_capture_on_commit_callbacks(execute=True):
        job_notify(job_id=job.pk, state="running")
    assert len(calls) == 1
