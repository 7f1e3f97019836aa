"""Notifications: e-mail to the owner (and leads for held jobs), Slack-style JSON to the webhook."""

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from django.core import mail

from queues.job_notify import NotifyError, job_notify
from queues.models import ApprovalPolicy
from queues.services.jobs import job_transition
from tests.queues.job_fixtures import job_world_setup, submit


@pytest.fixture
def jw(world):
    return job_world_setup(world)


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


def test_failure_mails_the_owner_and_posts_to_the_team_webhook(jw, webhook):
    jw["vision"].webhook_url = webhook.url
    jw["vision"].save()
    job = submit(jw, name="resnet")
    job_transition(
        job_id=job.pk, to_state="failed", fields={"exit_reason": "Worker w-0 exited with code 3."}
    )
    job_notify(job_id=job.pk, state="failed")
    assert len(mail.outbox) == 1
    assert mail.outbox[0].to == ["alice@example.org"]
    assert "exited with code 3" in mail.outbox[0].body
    (body,) = webhook.received
    assert set(body) == {"text"}
    assert "resnet" in body["text"] and "failed" in body["text"]
    assert f"/jobs/{job.pk}/" in body["text"]


def test_held_job_mails_the_leads_too(jw):
    ApprovalPolicy.objects.create(max_gpus_without_approval=1)
    job = submit(jw)
    job_notify(job_id=job.pk, state="pending_approval")
    assert sorted(mail.outbox[0].to) == ["alice@example.org", "bob@example.org"]


def test_a_failing_webhook_asks_for_a_retry(jw, webhook):
    webhook.handler.status = 503
    jw["vision"].webhook_url = webhook.url
    jw["vision"].save()
    job = submit(jw)
    with pytest.raises(NotifyError):
        job_notify(job_id=job.pk, state="running")
