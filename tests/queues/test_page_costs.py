"""What the job pages do to stay cheap must not change what they show: the navigation kept per
page and role is never another user's, and a job list row reads the same from a list's plain
row as from a Job."""

import pytest
from django.test.utils import override_script_prefix
from django.urls import reverse

from queues.models import Job
from queues.selectors.jobs import job_list_rows
from queues.templatetags.job_rows import job_rows
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
