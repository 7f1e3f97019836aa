"""Departments sharing idle GPUs across the organisation: platform admins put a department's
Kueue Cohort under the organisation's and weigh it (Cohort fair-sharing weights), the portal
renders the tree, lets teams borrow across sharing departments (ceiling, guard rails,
why-pending, the ledger), shows each department's share, and the what-if replays it."""

from decimal import Decimal

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.urls import reverse

from billing.services.ledger import borrowing_split
from queues.backends import backend_for
from queues.manifests.guardrails import team_ceiling
from queues.manifests.quotas import (
    ORGANISATION_COHORT,
    cohort_manifest,
    cohort_name,
)
from queues.models import AuditEvent, Department, ManagedObject, Quota
from queues.selectors.fair_share import department_sharing
from queues.selectors.jobs import job_capacity_problem, pending_reason_text, team_pool_limits
from queues.services.fair_share import department_fair_share_set
from queues.services.jobs.apply import job_apply
from queues.services.reconcile import cluster_check_drift, cluster_reconcile
from tests.conftest import wait_until
from tests.factories import MembershipFactory
from tests.queues.builders import submit, sync_until


def _share(world, *slugs, weight=None):
    for slug in slugs:
        department_fair_share_set(actor=world["admin"], department=world[slug],
                                  shares_with_organisation=True, weight=weight)  # fmt: skip
        world[slug].refresh_from_db()


# -- rendering -------------------------------------------------------------------------------------


def test_a_sharing_department_hangs_from_the_organisations_cohort_with_its_weight(world):
    research = world["research"]
    assert cohort_manifest(research)["spec"] == {}
    research.shares_with_organisation = True
    assert cohort_manifest(research)["spec"] == {"parentName": ORGANISATION_COHORT}
    research.fair_share_weight = Decimal("2.500")
    assert cohort_manifest(research)["spec"] == {
        "parentName": ORGANISATION_COHORT, "fairSharing": {"weight": "2.5"},
    }  # fmt: skip
    research.shares_with_organisation = False  # the weight waits until it shares
    assert cohort_manifest(research)["spec"] == {}


def test_the_organisations_cohort_is_rendered_only_while_a_department_shares(quota_world):
    w = quota_world

    def cohorts():
        objs = backend_for(w["cluster"]).cluster_objects(
            cluster=w["cluster"], pools=[w["a100"]], departments=list(Department.objects.all()),
            teams=[], tiers=[], quotas=[],
        )  # fmt: skip
        return {m["metadata"]["name"]: m["spec"] for _, _, m in objs if m["kind"] == "Cohort"}

    assert ORGANISATION_COHORT not in cohorts()
    _share(w, "research")
    rendered = cohorts()
    assert rendered[ORGANISATION_COHORT] == {}
    assert rendered[cohort_name(w["research"])] == {"parentName": ORGANISATION_COHORT}
    assert rendered[cohort_name(w["product"])] == {}


def test_a_team_may_borrow_from_every_sharing_department(quota_world):
    w = quota_world
    recsys = w["recsys"]
    Quota.objects.create(team=recsys, pool=w["a100"], nominal_gpus=2)
    quotas = list(Quota.objects.select_related("pool", "team__department"))
    # Alone, product lends recsys nothing; research lends vision's 2 (its lending limit) and
    # nlp's 4 once both share.
    assert team_ceiling(recsys, quotas) == 2
    assert team_pool_limits(team=recsys, name="a100")["ceiling"] == 2
    _share(w, "research", "product")
    quotas = list(Quota.objects.select_related("pool", "team__department"))
    assert team_ceiling(recsys, quotas) == 2 + 2 + 4
    limits = team_pool_limits(team=recsys, name="a100")
    assert (limits["ceiling"], limits["borrow"]) == (8, 6)
    # vision's borrowing limit (4) still caps what it takes, from anyone.
    assert team_pool_limits(team=w["vision"], name="a100")["ceiling"] == 12
    # A department that does not share borrows only at home, whoever else shares.
    department_fair_share_set(actor=w["admin"], department=w["product"],
                              shares_with_organisation=False)  # fmt: skip
    assert team_pool_limits(team=recsys, name="a100")["ceiling"] == 2


# -- who may, and what is said ---------------------------------------------------------------------


@pytest.mark.parametrize("who", ["alice", "bob", "maria", "pablo", "frank"])
def test_only_platform_admins_decide(world, who):
    with pytest.raises(PermissionDenied):
        department_fair_share_set(actor=world[who], department=world["research"],
                                  shares_with_organisation=True)  # fmt: skip
    assert not Department.objects.get(pk=world["research"].pk).shares_with_organisation


def test_the_service_says_what_to_fix_and_writes_nothing_half(world):
    for kwargs, field in [
        ({}, "shares_with_organisation"),
        ({"shares_with_organisation": "yes"}, "shares_with_organisation"),
        ({"weight": "-1"}, "weight"),
        ({"weight": "abc"}, "weight"),
        ({"shares_with_organisation": True, "weight": "0.0001"}, "weight"),
    ]:
        with pytest.raises(ValidationError) as exc:
            department_fair_share_set(actor=world["admin"], department=world["research"], **kwargs)
        assert field in exc.value.message_dict, kwargs
    research = Department.objects.get(pk=world["research"].pk)
    assert (research.shares_with_organisation, research.fair_share_weight) == (False, 1)
    assert not AuditEvent.objects.filter(verb="department.fair_share").exists()


def test_through_the_api_audited(world, api_as, api):
    url = "/api/v1/departments/research/fair-share/"
    body = {"shares_with_organisation": True, "weight": "3"}
    for who in ("alice", "maria", "frank"):  # they see the department, and may not change it
        assert api_as(world[who]).post(url, body, format="json").status_code == 403, who
    assert api_as(world["pablo"]).post(url, body, format="json").status_code == 404  # unseen
    assert api_as(world["pablo"]).get(url).status_code == 404
    api.logout()
    assert api.post(url, body, format="json").status_code in (401, 403)
    admin = api_as(world["admin"])
    for bad in [{}, {"weight": "abc"}, {"weight": "101"}, {"shares_with_organisation": "maybe"},
                {"weight": None}]:  # fmt: skip
        response = admin.post(url, bad, format="json")
        assert response.status_code == 400, (bad, response.content)
    done = admin.post(url, body, format="json")
    assert done.status_code == 200, done.content
    data = done.json()
    assert data["department"] == "research" and data["shares_with_organisation"] is True
    assert Decimal(data["weight"]) == 3
    event = AuditEvent.objects.get(verb="department.fair_share")
    assert event.actor == world["admin"] and event.department == world["research"]
    assert event.before == {"shares_with_organisation": False, "fair_share_weight": "1"}
    assert event.after == {"shares_with_organisation": True, "fair_share_weight": "3"}
    admin.post(url, body, format="json")  # the same again: nothing to record
    assert AuditEvent.objects.filter(verb="department.fair_share").count() == 1
    seen = api_as(world["alice"]).get(url)  # a member sees her department's
    assert seen.status_code == 200 and seen.json()["shares_with_organisation"] is True
    listed = api_as(world["alice"]).get("/api/v1/departments/research/").json()
    assert listed["shares_with_organisation"] is True and Decimal(listed["fair_share_weight"]) == 3
    # The department's own fields stay read-only through its own endpoint.
    admin.patch("/api/v1/departments/research/", {"shares_with_organisation": False},
                format="json")  # fmt: skip
    assert Department.objects.get(slug="research").shares_with_organisation


def test_the_departments_page(world, client):
    url = reverse("department-list")
    client.force_login(world["alice"])  # a member: her department, read only
    html = client.get(url).content.decode()
    assert 'data-testid="department-research"' in html
    assert 'data-testid="department-product"' not in html
    assert "Shares idle GPUs with the organisation" not in html  # no form
    change = reverse("department-fair-share", args=["research"])
    assert client.post(change, {"shares": "on", "weight": "2"}).status_code == 403
    client.force_login(world["pablo"])
    assert client.post(change, {"shares": "on", "weight": "2"}).status_code == 404
    client.force_login(world["admin"])
    html = client.get(url).content.decode()
    assert 'data-testid="department-product"' in html and "Save Research" in html
    page = client.post(change, {"shares": "on", "weight": "lots"}, follow=True).content.decode()
    assert "Research: Enter a number, e.g. 2 or 0.5." in page
    assert not Department.objects.get(slug="research").shares_with_organisation
    page = client.post(change, {"shares": "on", "weight": "2"}, follow=True).content.decode()
    assert "Research shares idle GPUs with the organisation (weight 2)" in page
    research = Department.objects.get(slug="research")
    assert research.shares_with_organisation and research.fair_share_weight == 2
    client.post(change, {"weight": "2"})  # the box unticked: it stops
    assert not Department.objects.get(slug="research").shares_with_organisation
    client.force_login(world["alice"])
    html = client.get(reverse("team-detail", args=["vision"])).content.decode()
    assert "Research's teams lend and borrow only among themselves." in html


# -- the ledger --------------------------------------------------------------------------------


def test_the_ledger_attributes_borrowing_across_departments_after_the_departments_own(
    quota_world,
):
    w = quota_world
    a100 = w["a100"]
    Quota.objects.filter(team=w["vision"], pool=a100).update(lending_limit=None)
    Quota.objects.create(team=w["recsys"], pool=a100, nominal_gpus=2)
    _share(w, "research", "product")
    teams = {t.pk: t for t in (w["vision"], w["nlp"], w["recsys"])}
    for t in teams.values():
        t.refresh_from_db()
    quotas = list(Quota.objects.filter(pool=a100).select_related("team"))
    # vision borrows 1 beyond its 8 (nlp, at home, lends it); recsys borrows 3 beyond its 2,
    # and product has no other team: research's idle quota left (nlp's other 3) lends them.
    held = {(w["vision"].pk, a100.pk): 9, (w["recsys"].pk, a100.pk): 5}
    split = borrowing_split(held=held, quotas=quotas, teams=teams)
    assert split[(w["vision"].pk, a100.pk)] == (1, 0)
    assert split[(w["recsys"].pk, a100.pk)] == (3, 0)
    assert split[(w["nlp"].pk, a100.pk)] == (0, 4)  # all it had idle: 1 at home, 3 abroad
    assert sum(b for b, _ in split.values()) == sum(lent for _, lent in split.values())
    department_fair_share_set(actor=w["admin"], department=w["product"],
                              shares_with_organisation=False)  # fmt: skip
    teams[w["recsys"].pk].refresh_from_db()
    split = borrowing_split(held=held, quotas=quotas, teams=teams)
    assert split[(w["nlp"].pk, a100.pk)] == (0, 1)  # only vision's, at home


# -- end to end on kubesim -------------------------------------------------------------------------


def test_a_team_runs_on_another_departments_idle_gpus_once_both_share(sim_jobs):
    w = sim_jobs
    engine = w["sim"].sim.controllers.kueue
    engine.fair_sharing = True
    recsys = w["recsys"]
    MembershipFactory(user=w["carol"], team=recsys, role="member")
    # recsys has 4 A100s and product no other team: 6 could never start.
    assert job_capacity_problem(team=recsys, pool=w["pools"]["a100"], workers=1,
                                gpus_per_worker=6) is not None  # fmt: skip
    _share(w, "research", "product", weight="2")
    department_fair_share_set(actor=w["admin"], department=w["research"], weight="1")
    cluster_reconcile(cluster_id=w["cluster"].pk)
    live = w["sim"].kube.get("kueue.x-k8s.io/v1beta2", "Cohort", cohort_name(w["product"]))
    assert live["spec"] == {"parentName": ORGANISATION_COHORT, "fairSharing": {"weight": "2"}}
    assert w["sim"].kube.get("kueue.x-k8s.io/v1beta2", "Cohort", ORGANISATION_COHORT)
    job = submit(w, user="carol", team="recsys", name="wide", gpus_per_worker=6)
    assert job_apply(job_id=job.pk) == "applied"
    assert sync_until(job, "running").state == "running"

    # Product borrows 2 of the 20 GPUs the organisation's teams lend (Kueue counts a resource
    # over all flavors: 16 A100s and vision's 4 L4s): 100 per thousand, over its weight of 2.
    def shares():
        cluster_check_drift(cluster_id=w["cluster"].pk)
        return department_sharing(departments=[w["product"]])[0]

    assert wait_until(
        lambda: shares()["shares"] == [{"cluster": w["cluster"].name, "share": 50}], timeout=10
    ), shares()
    row = shares()["pools"][0]
    assert (row["nominal_gpus"], row["in_use"], row["beyond_quota"]) == (4, 6, 2)
    assert ManagedObject.objects.get(kind="Cohort", name=cohort_name(w["product"])).live_status
    # A second wide job waits: research's idle GPUs are lent at most as far as they go.
    waiting = submit(w, user="carol", team="recsys", name="wider", gpus_per_worker=8)
    text = pending_reason_text(job=waiting, message="")
    assert "the department and the organisation have" in text


# -- the what-if -----------------------------------------------------------------------------------


def test_the_what_if_takes_departments_from_platform_admins_only(world):
    from planning.services.whatif import proposal_clean

    entry = [{"department": "product", "shares_with_organisation": True, "weight": "2"}]
    with pytest.raises(ValidationError) as exc:
        proposal_clean(user=world["pablo"], departments=entry)
    assert "departments" in exc.value.message_dict
    clean = proposal_clean(user=world["admin"], departments=entry)
    assert clean["departments"] == [{"department": world["product"].pk,
                                     "shares_with_organisation": True, "weight": "2"}]  # fmt: skip
    for bad, field in [
        ([{"department": "nowhere", "weight": "2"}], "departments[0].department"),
        ([{"department": "product", "weight": "-3"}], "departments[0].weight"),
        ([{"department": "product", "shares_with_organisation": 1}],
         "departments[0].shares_with_organisation"),
        ([{"department": "product"}], "departments[0]"),
    ]:  # fmt: skip
        with pytest.raises(ValidationError) as exc:
            proposal_clean(user=world["admin"], departments=bad)
        assert field in exc.value.message_dict, bad


def test_a_proposal_to_share_across_departments_replays_it_and_applies_it(
    quota_world, monkeypatch, api_as, django_capture_on_commit_callbacks
):
    """recsys (product, 4 A100s of its own) asked for three 4-GPU jobs of 2 h at once and ran
    them one after another, while research's A100s sat idle. Sharing with the organisation,
    research lends recsys vision's 2 (its lending limit) and nlp's 4: two run at once."""
    from datetime import timedelta

    from django.utils import timezone

    from planning.models import WhatIfRun
    from planning.services.whatif import whatif_compute
    from queues.models import Job
    from tests.factories import JobFactory
    from tests.queues.builders import run_tasks_eagerly

    w = quota_world
    Quota.objects.create(team=w["recsys"], pool=w["a100"], nominal_gpus=4)
    end = timezone.now()
    start = end - timedelta(days=1)
    for k in range(3):
        began = start + timedelta(hours=1 + 2 * k)
        JobFactory(team=w["recsys"], owner=w["carol"], tier=w["tiers"]["experiment"],
                   pool=w["a100"], cluster=w["cluster"], workers=1, gpus_per_worker=4,
                   state=Job.State.SUCCEEDED, submitted_at=start + timedelta(hours=1),
                   started_at=began, finished_at=began + timedelta(hours=2))  # fmt: skip
    both = [{"department": d.pk, "shares_with_organisation": True, "weight": None}
            for d in (w["research"], w["product"])]  # fmt: skip
    result = whatif_compute(days=1, proposal={"departments": both}, now=end)
    today = result["today"]["teams"][str(w["recsys"].pk)]
    proposed = result["proposal"]["teams"][str(w["recsys"].pk)]
    assert today["wait_p50_seconds"] == today["actual_wait_p50_seconds"] == 2 * 3600
    # Waits 0, 2 and 4 hours today; 0, 0 and 2 hours sharing.
    assert proposed["wait_p50_seconds"] == 0
    assert proposed["wait_p90_seconds"] == pytest.approx(0.8 * 2 * 3600)
    assert today["wait_p90_seconds"] == pytest.approx(2 * 3600 + 0.8 * 2 * 3600)
    # Only one of them sharing changes nothing: research lends only to who shares too.
    alone = whatif_compute(days=1, proposal={"departments": both[1:]}, now=end)
    assert alone["proposal"]["teams"][str(w["recsys"].pk)]["wait_p50_seconds"] == 2 * 3600

    run_tasks_eagerly(monkeypatch)
    body = {"days": 1, "departments": [
        {"department": "research", "shares_with_organisation": True},
        {"department": "product", "shares_with_organisation": True, "weight": "2"},
    ]}  # fmt: skip
    refused = api_as(w["pablo"]).post("/api/v1/whatif/", body, format="json")
    assert refused.status_code == 400 and "departments" in refused.json()
    admin = api_as(w["admin"])
    with django_capture_on_commit_callbacks(execute=True):
        made = admin.post("/api/v1/whatif/", body, format="json")
    assert made.status_code == 201, made.content
    run = WhatIfRun.objects.get()
    assert run.state == WhatIfRun.State.DONE
    assert run.result["proposal"]["teams"][str(w["recsys"].pk)]["wait_p50_seconds"] == 0
    assert admin.post(f"/api/v1/whatif/{run.pk}/apply/").status_code == 200
    research, product = (Department.objects.get(pk=w[s].pk) for s in ("research", "product"))
    assert research.shares_with_organisation and product.shares_with_organisation
    assert (research.fair_share_weight, product.fair_share_weight) == (1, 2)
    assert AuditEvent.objects.filter(verb="department.fair_share").count() == 2
    applied = AuditEvent.objects.get(verb="whatif.apply").after["departments"]
    assert applied["product"] == {"shares_with_organisation": True, "weight": "2"}


def test_the_what_if_form_proposes_sharing_to_platform_admins(quota_world, client):
    from planning.models import WhatIfRun

    w = quota_world
    client.force_login(w["maria"])  # a manager: no department rows
    assert 'data-testid="whatif-departments"' not in client.get("/quota/whatif/").content.decode()
    client.force_login(w["admin"])
    page = client.get("/quota/whatif/").content.decode()
    assert f'name="org-{w["product"].pk}"' in page
    bad = client.post("/quota/whatif/", {"days": "1", "departments-shown": "1",
                                         f"org-weight-{w['product'].pk}": "500"})  # fmt: skip
    assert bad.status_code == 400
    assert "Product (sharing with the organisation): Enter a weight from 0 to 100" in (
        bad.content.decode()
    )
    made = client.post("/quota/whatif/", {"days": "1", "departments-shown": "1",
                                          f"org-{w['product'].pk}": "on",
                                          f"org-weight-{w['research'].pk}": "1"})  # fmt: skip
    assert made.status_code == 302
    run = WhatIfRun.objects.get()  # research unchanged: not part of the proposal
    assert run.proposal["departments"] == [
        {"department": w["product"].pk, "shares_with_organisation": True, "weight": None}
    ]
    detail = client.get(f"/quota/whatif/{run.pk}/").content.decode()
    assert "Product shares idle GPUs with the organisation" in detail
