"""Followed pod logs against the real web server, as `scripts/serve web` runs it: open follows
hold no request thread (the portal keeps answering with ten of them open, more than its threads),
the caps per person and in all answer 429 with Retry-After, and a follow ends when the pod ends,
when the client goes away and after LOG_FOLLOW_MAX_SECONDS."""

import http.client
import time

import pytest
from django.core.signals import request_finished
from django.db import close_old_connections
from django.test import override_settings
from django.urls import reverse

from queues.models import Job, LogStream
from queues.services.jobs.apply import job_apply
from queues.services.tenancy import api_token_create
from tests.conftest import wait_until
from tests.fixtures_cluster import make_sim_cluster
from tests.queues.builders import sim_jobs_setup, submit, sync_until
from tests.web_server import get, web_server


@pytest.fixture
def sim_world(transactional_db, world):
    """kubesim registered and reconciled, visible to a web server in another process."""
    with make_sim_cluster() as sim:
        sim.sync()
        yield sim_jobs_setup(world, sim)


def _running(world, *, seconds):
    job = submit(world, name="logger", gpus_per_worker=1, expected_runtime_seconds=seconds)
    assert job_apply(job_id=job.pk) == "applied"
    return sync_until(job, Job.State.RUNNING)


class Follow:
    """An open follow: the status, and the stream read as it comes."""

    def __init__(self, port, job, token, *, tail=5):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        path = reverse("api-job-logs", args=[job.pk]) + f"?follow=1&tail={tail}"
        self.conn.request("GET", path, headers={"Authorization": f"Bearer {token}"})
        self.answer = self.conn.getresponse()
        self.status = self.answer.status

    def first(self) -> bytes:
        return self.answer.read1(4096)

    def rest(self) -> bytes:
        return self.answer.read()

    def close(self):
        self.conn.close()


def _token(user):
    return api_token_create(user=user, name="stream test")[1]


@pytest.mark.slow
def test_ten_follows_hold_no_request_thread(sim_world, tmp_path):
    job = _running(sim_world, seconds=600)
    token = _token(sim_world["alice"])
    with web_server(tmp_path, LOG_FOLLOWS_PER_USER=10) as port:
        # Before: how fast the health check and the job's page answer.
        detail = reverse("api-job-detail", args=[job.pk])
        follows = [Follow(port, job, token) for _ in range(10)]  # more than 2 x 4 threads
        try:
            assert [f.status for f in follows] == [200] * 10
            assert all(f.first() for f in follows)  # each one is streaming
            assert LogStream.objects.filter(job=job).count() == 10
            for _ in range(5):
                started = time.monotonic()
                status, body, _ = get(port, "/healthz", timeout=5)
                assert status == 200 and b'"database": "ok"' in body
                assert get(port, detail, token=token, timeout=5)[0] == 200
                assert time.monotonic() - started < 2.0
        finally:
            for follow in follows:
                follow.close()
        # Gone clients end their follows, which stop counting.
        assert wait_until(lambda: not LogStream.objects.filter(job=job).exists(), timeout=15)


@pytest.mark.slow
def test_follows_past_a_cap_are_answered_429(sim_world, tmp_path):
    job = _running(sim_world, seconds=600)
    alice, bob = _token(sim_world["alice"]), _token(sim_world["bob"])
    with web_server(tmp_path, LOG_FOLLOWS_PER_USER=2, LOG_FOLLOWS_TOTAL=3) as port:
        first, second = Follow(port, job, alice), Follow(port, job, alice)
        third = Follow(port, job, alice)
        assert (first.status, second.status, third.status) == (200, 200, 429)
        refusal = third.rest()
        assert b"following 2 logs already" in refusal
        assert third.answer.getheader("Retry-After") == "30"
        bobs = Follow(port, job, bob)
        assert bobs.status == 200
        overall = Follow(port, job, bob)
        assert overall.status == 429 and b"streaming 3 followed logs" in overall.rest()
        # A reader outside the team is refused as without follow, caps or not.
        assert Follow(port, job, _token(sim_world["carol"])).status == 404
        first.close()
        assert wait_until(lambda: LogStream.objects.filter(job=job).count() == 2, timeout=15)
        again = Follow(port, job, alice)
        assert again.status == 200 and again.first()
        for follow in (second, bobs, again, third, overall):
            follow.close()


@pytest.mark.slow
def test_a_follow_ends_when_the_pod_ends_or_at_its_longest(sim_world, tmp_path):
    long_job = _running(sim_world, seconds=600)
    token = _token(sim_world["alice"])
    with web_server(tmp_path, LOG_FOLLOW_MAX_SECONDS=10) as port:
        long = Follow(port, long_job, token)
        started = time.monotonic()
        # Started once the server is up, so that its pod still runs when the follow opens.
        short_job = _running(sim_world, seconds=4)
        short = Follow(port, short_job, token, tail=0)
        text = short.rest().decode()  # returns when the server ends the stream
        assert time.monotonic() - started < 9.5
        assert "step 1 " in text and text.rstrip().endswith("steps")
        text = long.rest().decode()
        assert 9.5 <= time.monotonic() - started < 20 and "step" in text
        assert wait_until(lambda: not LogStream.objects.exists(), timeout=10)


@override_settings(LOG_FOLLOWS_PER_USER=1)
def test_the_cap_holds_for_a_follow_served_by_a_thread(sim_jobs, api_as):
    """The same cap under WSGI (the test client), where a follow is a synchronous stream."""
    job = _running(sim_jobs, seconds=60)
    url = reverse("api-job-logs", args=[job.pk])
    held = api_as(sim_jobs["alice"]).get(url, {"follow": 1, "tail": 1})
    assert held.status_code == 200
    refused = api_as(sim_jobs["alice"]).get(url, {"follow": 1})
    assert refused.status_code == 429 and refused["Retry-After"] == "30"
    assert "following 1 logs already" in refused.json()["detail"]
    # The response closed (as the server closes it when the client goes away, here without
    # Django closing the test's database connection): the follow no longer counts.
    request_finished.disconnect(close_old_connections)
    try:
        held.close()
    finally:
        request_finished.connect(close_old_connections)
    assert not LogStream.objects.exists()
    assert api_as(sim_jobs["alice"]).get(url, {"follow": 1, "tail": 1}).status_code == 200
