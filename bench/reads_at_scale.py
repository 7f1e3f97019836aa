"""Benchmark: the job pages with a million jobs in PostgreSQL (issue 13's "reads at scale").

    DATABASE_URL=postgres://postgres:postgres@127.0.0.1:5432/qm_jobs \\
    SECRET_KEY=bench DEBUG=false .venv/bin/python -m bench.reads_at_scale [--jobs 1000000]

What runs: a database `<DATABASE_URL name>_reads` built by the migrations and filled once with
`--jobs` jobs (kept between runs: filling takes about a minute) across 4 teams of 5 researchers,
spread over a year. Each page is requested in this process through Django's test client, as a
signed-in researcher, for `--seconds` seconds:
  - the job list (/jobs/, the user's newest 50, and an older page by keyset cursor),
  - a team's job list (/jobs/team/<slug>/),
  - a job's page (/jobs/<id>/), and the team page (/teams/<slug>/);
beside a bare Django view reading the same rows (a list's rows with the columns the list shows,
a job with the relations its page names, its pods and its transitions; rendered as plain text,
no sign-in, no template) in the same run, the two asked in turns of a quarter second so that a
passing load weighs on both alike. The bare views of a team's jobs and of a job never read the
user: the same views behind login_required are measured too, for what the session and the user
alone cost (the bare view of my jobs reads the user already); and the narrow bare views earlier
rounds measured against (a list's own columns, a job's row alone). The cache is Redis, as in
production (CACHE_URL, default redis://127.0.0.1:6379/12). Measured: requests per second of
each and their ratio, and the SQL queries per page (from an empty cache) at full size and again
after 2,000 more jobs (they must not grow).
Targets: detail ≥ 40 %, list ≥ 25 % of the bare view's requests per second.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from urllib.parse import urlparse, urlunparse

TARGETS = {"detail": 0.40, "list": 0.25, "team list": 0.25}
TEAMS = ("vision", "nlp", "speech", "robotics")
USERS_PER_TEAM = 5


# -- bare views: the same rows, no portal ---------------------------------------------------
# Each reads the rows its page shows, as plain Django would (no sign-in, no permission, no
# template): a list's rows with the columns it shows (queues.selectors.jobs.LIST_FIELDS), and a
# job with the team, owner, pool, tier and cluster its page names, its pods and its transitions.
# The narrow ones, which earlier rounds measured against, read fewer: a list's own columns
# without the names it joins in, a job's row alone.


def _text(rows):
    from django.http import HttpResponse

    return HttpResponse("\n".join(" ".join(map(str, r)) for r in rows), content_type="text/plain")


def bare_list(request):
    from queues.models import Job
    from queues.selectors.jobs import LIST_FIELDS

    jobs = Job.objects.filter(owner=request.user).order_by("-pk")
    return _text(jobs.values_list(*LIST_FIELDS)[:50])


def bare_team_list(request, slug):
    from queues.models import Job
    from queues.selectors.jobs import LIST_FIELDS

    jobs = Job.objects.filter(team__slug=slug).order_by("-pk")
    return _text(jobs.values_list(*LIST_FIELDS)[:50])


def bare_detail(request, pk):
    from queues.models import Job

    job = Job.objects.select_related("team", "owner", "pool", "tier", "cluster").get(pk=pk)
    rows = [(f.attname, getattr(job, f.attname)) for f in Job._meta.concrete_fields]
    rows += [(name, getattr(job, name)) for name in ("team", "owner", "pool", "tier", "cluster")]
    rows += [(p.name, p.node_name, p.phase, p.started_at) for p in job.pods.defer("log_tail")]
    rows += [(t.to_state, t.at, t.reason) for t in job.transitions.all()]
    return _text(rows)


def narrow_list(request):
    from queues.models import Job

    jobs = Job.objects.filter(owner=request.user).order_by("-pk")
    return _text(jobs.values_list("pk", "name", "state", "workers", "gpus_per_worker",
                                  "created_at")[:50])  # fmt: skip


def narrow_team_list(request, slug):
    from queues.models import Job

    jobs = Job.objects.filter(team__slug=slug).order_by("-pk")
    return _text(jobs.values_list("pk", "name", "state", "owner__username", "created_at")[:50])


def narrow_detail(request, pk):
    from queues.models import Job

    return _text(Job.objects.filter(pk=pk).values().get().items())


def _urlconf():
    """The portal's routes plus the bare views, as this module's urlpatterns; also the bare
    views that never read the user (a team's jobs, a job) behind login_required, as every
    portal page is: what reading the session and the user alone costs."""
    from django.contrib.auth.decorators import login_required
    from django.urls import include, path

    return [
        path("bare/list/", bare_list),
        path("bare/team/<slug:slug>/", bare_team_list),
        path("bare/jobs/<int:pk>/", bare_detail),
        path("bare/signed-in/team/<slug:slug>/", login_required(bare_team_list)),
        path("bare/signed-in/jobs/<int:pk>/", login_required(bare_detail)),
        path("narrow/list/", narrow_list),
        path("narrow/team/<slug:slug>/", narrow_team_list),
        path("narrow/jobs/<int:pk>/", narrow_detail),
        path("", include("config.urls")),
    ]


urlpatterns: list = []


# -- data -------------------------------------------------------------------------------------


def fill(jobs: int) -> None:
    """Tenancy, a cluster and `jobs` jobs (by SQL: a million ORM saves would take an hour)."""
    from django.contrib.auth import get_user_model
    from django.db import connection

    from fleet.models import Cluster, GpuModel, NodePool
    from queues.models import Department, Job, Membership, PriorityTier, Team

    if Job.objects.count() >= jobs:
        return
    with connection.cursor() as cursor:  # a delete through the ORM would collect every row
        cursor.execute(f"TRUNCATE {Job._meta.db_table} CASCADE")
    dept, _ = Department.objects.get_or_create(slug="research", defaults={"name": "Research"})
    cluster, _ = Cluster.objects.get_or_create(
        name="bench", defaults={"kubeconfig_path": "/dev/null"}
    )
    model, _ = GpuModel.objects.get_or_create(name="A100")
    pool, _ = NodePool.objects.get_or_create(
        cluster=cluster, name="a100", defaults={"gpu_model": model, "node_selector": {"a": "b"}}
    )
    tier, _ = PriorityTier.objects.get_or_create(name="experiment", defaults={"value": 100})
    users = []
    for slug in TEAMS:
        team, _ = Team.objects.get_or_create(
            slug=slug,
            defaults={"name": slug.title(), "namespace": f"team-{slug}", "department": dept},
        )
        for i in range(USERS_PER_TEAM):
            user, _ = get_user_model().objects.get_or_create(username=f"{slug}-{i}")
            Membership.objects.get_or_create(user=user, team=team, defaults={"role": "member"})
            users.append((team.pk, user.pk))
    # Every column the model has: the given values, else the field's default (as SQL).
    given = {
        # (%% is SQL's modulo, doubled for the query's parameter syntax.)
        "name": "'run ' || g", "k8s_name": "'run-' || g", "image": "'ghcr.io/acme/train:1'",
        "command": "'[\"python\", \"train.py\"]'::jsonb", "workers": "1 + g %% 4",
        "gpus_per_worker": "1 + g %% 8", "pool_id": str(pool.pk), "tier_id": str(tier.pk),
        "cluster_id": str(cluster.pk),
        "state": "(ARRAY['succeeded','failed','cancelled'])[1 + g %% 3]",
        "max_runtime_seconds": "3600",
        "created_at": "now() - (g * 31 || ' seconds')::interval",
        "submitted_at": "now() - (g * 31 || ' seconds')::interval",
        "finished_at": "now() - (g * 31 || ' seconds')::interval + interval '1 hour'",
        "desired_generation": "1", "applied_generation": "1",
        "team_id": f"(ARRAY{[t for t, _ in users]})[1 + g %% {len(users)}]",
        "owner_id": f"(ARRAY{[u for _, u in users]})[1 + g %% {len(users)}]",
    }  # fmt: skip
    columns, values = [], []
    for field in Job._meta.concrete_fields:
        if field.primary_key:
            continue
        columns.append(field.column)
        if field.attname in given or field.name in given:
            values.append(given.get(field.attname) or given[field.name])
        elif field.null:
            values.append("NULL")
        else:
            default = field.get_default()
            values.append("'{}'::jsonb" if isinstance(default, dict) else
                          "'[]'::jsonb" if isinstance(default, list) else
                          "TRUE" if default is True else "FALSE" if default is False else
                          str(default) if isinstance(default, int) else "''")  # fmt: skip
    sql = (
        f"INSERT INTO {Job._meta.db_table} ({', '.join(columns)}) "
        f"SELECT {', '.join(values)} FROM generate_series(1, %s) AS g"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [jobs])
        cursor.execute(f"ANALYZE {Job._meta.db_table}")


def _give_a_run(job) -> None:
    """The measured job ran as jobs do: two pods and its state changes (the filled rows have
    none, and a job's page and its bare view read them)."""
    from datetime import timedelta

    from queues.models import JobPod, JobTransition

    if job.transitions.exists():
        return
    start = job.submitted_at
    states = ["submitted", "queued", "admitted", "running", job.state]
    JobTransition.objects.bulk_create(
        JobTransition(job=job, from_state=a, to_state=b, at=start + timedelta(seconds=30 * i),
                      reason="as it happened")
        for i, (a, b) in enumerate(zip(states, states[1:], strict=False))
    )  # fmt: skip
    JobPod.objects.bulk_create(
        JobPod(job=job, name=f"run-{job.pk}-{i}", namespace="team-vision", gpus=2,
               node_name=f"gpu-node-{i}", phase="Succeeded", exit_code=0,
               started_at=start + timedelta(seconds=90), finished_at=job.finished_at)
        for i in range(2)
    )  # fmt: skip


# -- measuring --------------------------------------------------------------------------------


def rates(client, urls: list[str], seconds: float, turn: float = 0.25) -> list[float]:
    """Requests per second of GET each url, `seconds` each (after a warm-up request), asked in
    turns of `turn` seconds one url after the other: a load on the machine that comes and goes
    (this VM has two cores) weighs on a page and its bare view alike."""
    for url in urls:
        assert client.get(url).status_code == 200, url
    done, spent = [0] * len(urls), [0.0] * len(urls)
    while min(spent) < seconds:
        for i, url in enumerate(urls):
            start = time.perf_counter()
            while time.perf_counter() - start < turn:
                response = client.get(url)
                assert response.status_code == 200, (url, response.status_code)
                done[i] += 1
            spent[i] += time.perf_counter() - start
    return [n / s for n, s in zip(done, spent, strict=True)]


def queries(client, url: str) -> int:
    """SQL queries of GET url, from an empty cache (the team page keeps some figures a few
    minutes: counted cold, every count is the most the page reads)."""
    from django.core.cache import cache
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    cache.clear()
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(url).status_code == 200
    return len(ctx.captured_queries)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--seconds", type=float, default=5.0, help="per page measured")
    args = parser.parse_args(argv)
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        raise SystemExit("Set DATABASE_URL=postgres://...")
    url = urlparse(os.environ["DATABASE_URL"])
    os.environ["DATABASE_URL"] = urlunparse(url._replace(path=url.path + "_reads"))
    # A shared cache as production has (compose and the deployment): who the reader is is kept
    # between requests there (core/principal.py).
    os.environ.setdefault("CACHE_URL", "redis://127.0.0.1:6379/12")
    os.environ.setdefault("SECURE_HTTPS", "false")
    os.environ.setdefault("ALLOWED_HOSTS", "testserver")
    from bench.db import setup_django

    setup_django()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.test import Client

    from queues.models import Job

    started = time.perf_counter()
    fill(args.jobs)
    print(f"{Job.objects.count():,} jobs in the database (ready after "
          f"{time.perf_counter() - started:.0f} s)")  # fmt: skip
    global urlpatterns
    urlpatterns = _urlconf()
    settings.ROOT_URLCONF = __name__
    settings.DEBUG = False
    user = get_user_model().objects.get(username="vision-0")
    client = Client()
    client.force_login(user)
    newest = Job.objects.filter(owner=user).order_by("-pk").values_list("pk", flat=True)
    deep = newest[min(20_000, newest.count() // 2)]
    job_id = newest[137]
    _give_a_run(Job.objects.get(pk=job_id))
    # (page, bare view, the bare view signed in when the bare view does not read the user, the
    # narrow bare view)
    pages = {
        "list": ("/jobs/", "/bare/list/", None, "/narrow/list/"),
        "list, deep page": (f"/jobs/?before={deep}", "/bare/list/", None, "/narrow/list/"),
        "team list": ("/jobs/team/vision/", "/bare/team/vision/", "/bare/signed-in/team/vision/",
                      "/narrow/team/vision/"),
        "detail": (f"/jobs/{job_id}/", f"/bare/jobs/{job_id}/", f"/bare/signed-in/jobs/{job_id}/",
                   f"/narrow/jobs/{job_id}/"),
        "team page": ("/teams/vision/", None, None, None),
    }  # fmt: skip
    counts = {name: queries(client, page) for name, (page, *_) in pages.items()}
    results = {}
    for name, urls in pages.items():
        measured = iter(rates(client, [url for url in urls if url], args.seconds))
        results[name] = [next(measured) if url else None for url in urls]
    # 2,000 more jobs for this user and team: the query counts must not move.
    Job.objects.bulk_create(
        [Job(**{f.attname: getattr(Job.objects.get(pk=job_id), f.attname)
                for f in Job._meta.concrete_fields if not f.primary_key}) for _ in range(2000)]
    )  # fmt: skip
    after = {name: queries(client, page) for name, (page, *_) in pages.items()}

    print(f"\nReads at scale ({args.jobs:,} jobs; {args.seconds:.0f} s per page, one process; "
          f"cache {settings.CACHES['default']['BACKEND'].rsplit('.', 1)[-1]})")  # fmt: skip
    for name, (portal, base, signed_in, narrow) in results.items():
        line = f"  {name:16s} {portal:7.1f} req/s"
        if base:
            ratio = portal / base
            target = TARGETS.get(name)
            verdict = (
                f" (target ≥ {target:.0%}: {'met' if ratio >= target else 'MISSED'})"
                if target
                else ""
            )
            line += f" vs bare view {base:7.1f} req/s = {ratio:.0%}{verdict}"
        line += f"; {counts[name]} queries ({after[name]} with 2,000 more jobs)"
        if signed_in:
            line += f"; the bare view signed in: {signed_in:.1f} req/s = {signed_in / base:.0%}"
        if narrow:
            line += (
                f"; the narrow bare view: {narrow:.1f} req/s, the page {portal / narrow:.0%} of it"
            )
        print(line)
    grew = [n for n in counts if after[n] != counts[n]]
    print("query counts bounded: " + ("yes" if not grew else f"NO ({', '.join(grew)})"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
