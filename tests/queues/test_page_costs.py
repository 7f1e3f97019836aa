"""What the job pages do to stay cheap must not change what they show: the navigation kept per
page and role is never another user's, a job list row reads the same from a list's plain row as
from a Job, and my jobs still shows my teams, sweeps and templates."""

import pytest
from django.test.utils import override_script_prefix
from django.urls import reverse

from queues.models import Job
from queues.selectors.jobs import job_list_rows
from queues.templatetags.job_rows import job_rows
from tests.factories import (
    JobPodFactory,
    JobTemplateFactory,
    JobTransitionFactory,
    SweepFactory,
)
from tests.queues.builders import submit


def _nav(body: str) -> str:
    return body.split('<nav class="mainnav"', 1)[1].split("</nav>", 1)[0]


@pytest.mark.django_db
def test_the_navigation_is_each_users_own_whoever_asked_before(client, world):
    seen = {}
    for who in ("admin", "alice", "bob", "admin", "alice", "maria"):
        client.force_login(world[who])
        nav = _nav(client.get(reverse("job-list")).content.decode())
        admin = who == "admin"
        assert ('href="/admin/"' in nav) is admin, who
        assert ("Approval policy" in nav) is admin, who
        assert '<a href="/jobs/" aria-current="page">Jobs</a>' in nav
        seen.setdefault(who, nav)
        assert nav == seen[who]
    assert seen["alice"] == seen["bob"] == seen["maria"] != seen["admin"]
    home = _nav(client.get(reverse("home")).content.decode())
    assert '<a href="/" aria-current="page">Home</a>' in home
    assert '<a href="/jobs/" >Jobs</a>' in home


@pytest.mark.django_db
def test_the_navigation_follows_the_url_prefix(client, world):
    client.force_login(world["alice"])
    with override_script_prefix("/portal/"):  # as a server mounted under /portal sets it
        nav = _nav(client.get("/").content.decode())
    assert 'href="/portal/jobs/"' in nav and 'href="/jobs/"' not in nav
    assert 'href="/jobs/"' in _nav(client.get(reverse("home")).content.decode())


def test_a_list_row_and_a_job_render_alike(jw):
    job = submit(jw, name='<b>"run" & co</b>')
    Job.objects.filter(pk=job.pk).update(
        state=Job.State.QUEUED, queue_position=3, admitted_pool=jw["pools"]["l4"]
    )
    job = Job.objects.select_related("team", "owner", "pool", "tier", "admitted_pool").get()
    row = job_list_rows(user=jw["alice"]).get(pk=job.pk)
    html = str(job_rows([row]))
    assert html == str(job_rows([job]))
    assert "&lt;b&gt;&quot;run&quot; &amp; co&lt;/b&gt;" in html and "<b>" not in html
    assert "#3 in queue" in html and "<td>l4</td>" in html and "badge-warn" in html
    assert f'href="/jobs/{job.pk}/"' in html and ">Queued</span>" in html


@pytest.mark.django_db
def test_my_jobs_shows_my_teams_sweeps_and_templates(client, world):
    alice, vision = world["alice"], world["vision"]
    mine = SweepFactory(team=vision, owner=alice, name="lr <grid>")
    SweepFactory(team=vision, owner=world["bob"], name="bob's")
    saved = JobTemplateFactory(team=vision, name="base & co", created_by=world["bob"])
    orphan = JobTemplateFactory(team=vision, name="orphan", created_by=None)
    JobTemplateFactory(team=world["nlp"], name="not ours")
    client.force_login(alice)
    body = client.get(reverse("job-list")).content.decode()
    assert 'href="/jobs/team/vision/">Vision\'s jobs</a>' in body.replace("&#x27;", "'")
    assert 'href="/jobs/team/vision/queue/">' in body and "Language" not in body
    assert f'<a href="/jobs/sweeps/{mine.pk}/">lr &lt;grid&gt;</a>' in body and "bob's" not in body
    assert (
        f'?template={saved.pk}">base &amp; co</a> <span class="muted">Vision · saved by bob<'
        in body
    )
    assert f'?template={orphan.pk}">orphan</a> <span class="muted">Vision · saved by —<' in body
    assert "not ours" not in body


@pytest.mark.parametrize(
    "page, queries",
    [
        # session, user, groups, visible teams, jobs, my teams, sweeps, templates
        ("job-list", 8),
        # session, user, groups, visible teams, the team, jobs
        ("job-team-list", 6),
        # session, user, groups, visible teams, the job, pods, transitions, the reader's role
        ("job-detail", 8),
    ],
)
def test_the_job_pages_read_a_fixed_number_of_queries(jw, client, django_assert_num_queries,
                                                      page, queries):  # fmt: skip
    job = submit(jw)
    Job.objects.filter(pk=job.pk).update(state=Job.State.SUCCEEDED)
    for i in range(3):  # each pod's kept log is not read by the page (nor one query per pod)
        JobPodFactory(job=job, name=f"train-{i}", node_name=f"gpu-node-{i}", log_tail="x\n" * 2000)
        JobTransitionFactory(job=job)
    args = {"job-list": [], "job-team-list": ["vision"], "job-detail": [job.pk]}[page]
    client.force_login(jw["alice"])
    with django_assert_num_queries(queries) as ctx:
        body = client.get(reverse(page, args=args)).content.decode()
    assert f'href="/jobs/{job.pk}/"' in body or "<code>train-2</code></td><td>gpu-node-2" in body
    assert not any("log_tail" in q["sql"] for q in ctx.captured_queries)


def test_each_reader_sees_their_own_teams_jobs_on_the_pages(jw, client):
    """The visible teams are kept per request on the user who asks, never across users."""
    ours, theirs = submit(jw), submit(jw, user="carol", team="nlp")
    for who, sees_ours, sees_theirs in [
        ("alice", True, False), ("carol", False, True), ("maria", True, True),
        ("admin", True, True), ("alice", True, False),
    ]:  # fmt: skip
        client.force_login(jw[who])
        for job, visible in ((ours, sees_ours), (theirs, sees_theirs)):
            answer = client.get(reverse("job-detail", args=[job.pk]))
            assert answer.status_code == (200 if visible else 404), (who, job.name)
            team = client.get(reverse("job-team-list", args=[job.team.slug]))
            assert team.status_code == (200 if visible else 404), (who, job.team.slug)
