"""Sharing a team's queue fairly among its members (Kueue's admission fair sharing): managers and
admins turn it on per team and weigh members; each member's jobs wait in their own LocalQueue,
the team's ClusterQueue serves the member who used least lately first, and the team sees each
member's remembered use."""

from decimal import Decimal

import pytest
from django.core.exceptions import PermissionDenied
from django.urls import reverse

from kueuemodel.afs import AfsConfig
from queues.backends import backend_named
from queues.manifests.quotas import cluster_queue_manifest, cluster_queue_name, member_queue_name
from queues.models import AuditEvent, Job, ManagedObject, Membership
from queues.selectors.fair_share import team_member_fair_share
from queues.selectors.jobs import pending_reason_text
from queues.services.fair_share import team_member_fair_sharing_set
from queues.services.jobs.apply import job_apply
from queues.services.jobs.lifecycle import job_transition
from queues.services.reconcile import cluster_check_drift, cluster_desired_state, cluster_reconcile
from tests.conftest import wait_until
from tests.crd_validation import assert_valid_manifest
from tests.factories import MembershipFactory, UserFactory
from tests.queues.builders import submit, sync_until

URL = "/api/v1/teams/vision/member-fair-sharing/"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def _desired(world, kind, name=None):
    return [m for _, _, m in cluster_desired_state(cluster=world["cluster"])
            if m["kind"] == kind and (name is None or m["metadata"]["name"] == name)]  # fmt: skip


def test_member_queue_names_are_readable_unique_and_short(world):
    vision = world["vision"]
    assert member_queue_name(vision, world["alice"]) == f"vision-alice-{world['alice'].pk}"
    twin = UserFactory(username="Alice")  # another user whose name reads the same
    assert member_queue_name(vision, twin) != member_queue_name(vision, world["alice"])
    long = UserFactory(username="名前" + "x" * 140)
    name = member_queue_name(vision, long)
    assert len(name) <= 63 and name.startswith("vision-mingqianxx") and name.endswith(f"-{long.pk}")


def test_a_team_that_shares_among_members_gets_an_admission_scope_and_a_queue_each(jw):
    vision = jw["vision"]
    assert "admissionScope" not in cluster_queue_manifest(vision, [])["spec"]
    assert not _desired(jw, "LocalQueue", member_queue_name(vision, jw["alice"]))
    team_member_fair_sharing_set(actor=jw["maria"], team=vision, enabled=True,
                                 weights={"bob": "2"})  # fmt: skip
    cq = _desired(jw, "ClusterQueue", cluster_queue_name(vision))[0]
    assert cq["spec"]["admissionScope"] == {"admissionMode": "UsageBasedAdmissionFairSharing"}
    assert_valid_manifest(cq)
    queues = {m["metadata"]["name"]: m for m in _desired(jw, "LocalQueue")
              if m["metadata"]["namespace"] == vision.namespace}  # fmt: skip
    mine, bobs = member_queue_name(vision, jw["alice"]), member_queue_name(vision, jw["bob"])
    assert set(queues) == {vision.slug, mine, bobs}  # the team's own stays for older jobs
    assert queues[mine]["spec"] == {
        "clusterQueue": cluster_queue_name(vision),
        "stopPolicy": "None",
    }
    assert queues[bobs]["spec"]["fairSharing"] == {"weight": "2"}
    assert queues[bobs]["metadata"]["labels"]["quartermaster.dev/member"] == "bob"
    for manifest in queues.values():
        assert_valid_manifest(manifest)
    # Held with the team's queues.
    type(vision).objects.filter(pk=vision.pk).update(queue_hold_reason="budget")
    assert _desired(jw, "LocalQueue", mine)[0]["spec"]["stopPolicy"] == "Hold"


def test_jobs_wait_in_their_owners_queue_and_the_queue_outlives_the_setting(jw):
    vision = jw["vision"]
    before = submit(jw, name="before")
    assert before.local_queue == ""
    team_member_fair_sharing_set(actor=jw["admin"], team=vision, enabled=True)
    vision.refresh_from_db()
    job = submit(jw, name="after")
    mine = member_queue_name(vision, jw["alice"])
    assert job.local_queue == mine
    labels = backend_named("kueue").job_objects(Job.objects.get(pk=job.pk))[0]["metadata"]["labels"]
    assert labels[QUEUE_LABEL] == mine
    assert (
        backend_named("kueue").job_objects(before)[0]["metadata"]["labels"][QUEUE_LABEL] == "vision"
    )
    # Stopping keeps alice's queue while her job waits in it (and the member may have left).
    team_member_fair_sharing_set(actor=jw["admin"], team=vision, enabled=False)
    Membership.objects.filter(user=jw["alice"], team=vision).delete()
    assert _desired(jw, "LocalQueue", mine)
    assert not _desired(jw, "LocalQueue", member_queue_name(vision, jw["bob"]))
    assert (
        "admissionScope" not in _desired(jw, "ClusterQueue", cluster_queue_name(vision))[0]["spec"]
    )
    job_transition(job_id=job.pk, to_state=Job.State.CANCELLED, reason="test")
    assert not _desired(jw, "LocalQueue", mine)


def test_a_manager_turns_it_on_through_the_api_audited_and_says_what_to_fix(jw, api_as, api):
    assert api_as(jw["alice"]).post(URL, {"enabled": True}, format="json").status_code == 403
    assert api_as(jw["bob"]).post(URL, {"enabled": True}, format="json").status_code == 403
    assert api_as(jw["pablo"]).post(URL, {"enabled": True}, format="json").status_code == 404
    assert api_as(jw["frank"]).post(URL, {"enabled": True}, format="json").status_code == 403
    api.logout()
    assert api.post(URL, {"enabled": True}, format="json").status_code in (401, 403)
    client = api_as(jw["maria"])
    for body, field in [({}, "non_field_errors"), ({"enabled": "maybe"}, "enabled"),
                        ({"weights": {"bob": "-1"}}, "weights"),
                        ({"weights": {"bob": "abc"}}, "weights"),
                        ({"weights": ["bob"]}, "weights")]:  # fmt: skip
        response = client.post(URL, body, format="json")
        assert response.status_code == 400 and field in response.json(), (body, response.content)
    response = client.post(URL, {"weights": {"carol": "2"}}, format="json")  # not a member
    assert response.status_code == 400
    assert response.json() == {"weights.carol": ["carol is not a member of Vision."]}
    assert not AuditEvent.objects.filter(verb="team.member_fair_sharing").exists()
    done = client.post(URL, {"enabled": True, "weights": {"bob": "0.5"}}, format="json")
    assert done.status_code == 200, done.content
    body = done.json()
    assert body["enabled"] is True and body["reported"] is False
    assert {m["username"]: m["weight"] for m in body["members"]} == {"alice": "1.000",
                                                                    "bob": "0.500"}  # fmt: skip
    event = AuditEvent.objects.get(verb="team.member_fair_sharing")
    assert event.actor == jw["maria"] and event.team == jw["vision"]
    assert event.after == {"member_fair_sharing": True, "weight of bob": "0.5"}
    client.post(URL, {"enabled": True, "weights": {"bob": "0.500"}}, format="json")  # unchanged
    assert AuditEvent.objects.filter(verb="team.member_fair_sharing").count() == 1
    # The team's members read it; the team record says it is on.
    seen = api_as(jw["alice"]).get(URL)
    assert seen.status_code == 200 and [m["username"] for m in seen.json()["members"]]
    assert api_as(jw["alice"]).get("/api/v1/teams/vision/").json()["member_fair_sharing"] is True
    assert api_as(jw["carol"]).get(URL).status_code == 404  # another team's member


@pytest.mark.parametrize("who", ["alice", "bob", "carol", "pablo", "frank"])
def test_only_admins_and_the_departments_managers_may_change_it(jw, who):
    with pytest.raises(PermissionDenied):
        team_member_fair_sharing_set(actor=jw[who], team=jw["vision"], enabled=True)
    assert not jw["vision"].member_fair_sharing


def test_members_are_listed_in_the_order_kueue_serves_them(jw):
    vision = jw["vision"]
    dora = UserFactory(username="dora")
    MembershipFactory(user=dora, team=vision)
    team_member_fair_sharing_set(actor=jw["maria"], team=vision, enabled=True,
                                 weights={"bob": "2"})  # fmt: skip
    for user, consumed in [(jw["alice"], "3"), (jw["bob"], "4"), (dora, "2500m")]:
        ManagedObject.objects.create(
            cluster=jw["cluster"], api_version="kueue.x-k8s.io/v1beta2", kind="LocalQueue",
            namespace=vision.namespace, name=member_queue_name(vision, user), owner_type="team",
            owner_id=vision.pk, live_status={"fairSharing": {"weightedShare": 0,
            "admissionFairSharingStatus": {"consumedResources": {
                "nvidia.com/gpu": consumed, "cpu": "12", "memory": "64Gi"},
                "lastUpdate": "2026-11-25T10:00:00Z"}}},
        )  # fmt: skip
    vision.refresh_from_db()
    card = team_member_fair_share(team=vision)
    assert card["reported"] and card["enabled"]
    # bob used most but weighs 2: 4 / 2 = 2, below dora's 2.5 and alice's 3.
    assert [(m["username"], m["usage"]) for m in card["members"]] == [
        ("bob", 2.0), ("dora", 2.5), ("alice", 3.0)]  # fmt: skip
    assert card["members"][0]["consumed_gpus"] == 4.0  # GPUs only, not cpu or memory
    # Why-pending counts the teammates ahead, without naming them.
    jw["alice"].refresh_from_db()
    vision.refresh_from_db()
    alices = submit(jw, name="mine")
    dora_job = submit({**jw, "dora": dora}, user="dora", name="theirs")
    text = pending_reason_text(job=alices, message="")
    assert "shares its queue fairly among its members" in text
    assert "Your recent use counts 3.0 GPUs (weight 1); 1 teammate waiting now used less." in text
    assert "dora" not in text
    text = pending_reason_text(job=dora_job, message="")
    assert "no more than any teammate waiting now" in text


def test_kueue_serves_the_member_who_used_least_first(sim_jobs):
    """End to end on kubesim: alice's job fills vision's A100 quota, then alice and bob both
    wait for it; bob asked later but is admitted first, and the team sees alice's usage."""
    w = sim_jobs
    kueue = w["sim"].sim.controllers.kueue
    kueue.set_admission_fair_sharing(AfsConfig(half_life=3600.0, sampling=1.0,
                                               weights={"cpu": 0.0, "memory": 0.0}))  # fmt: skip
    from queues.models import Quota

    Quota.objects.filter(team=w["vision"]).update(borrowing_limit=0)
    team_member_fair_sharing_set(actor=w["maria"], team=w["vision"], enabled=True)
    w["vision"].refresh_from_db()
    cluster_reconcile(cluster_id=w["cluster"].pk)
    first = submit(w, name="first", gpus_per_worker=8, expected_runtime_seconds=3)
    assert job_apply(job_id=first.pk) == "applied"
    assert sync_until(first, Job.State.RUNNING).state == Job.State.RUNNING
    again = submit(w, name="again", gpus_per_worker=8)
    later = submit(w, user="bob", name="later", gpus_per_worker=8)
    for job in (again, later):
        assert job_apply(job_id=job.pk) == "applied"
    assert sync_until(later, Job.State.RUNNING, timeout=30).state == Job.State.RUNNING
    again.refresh_from_db()
    assert again.state in (Job.State.QUEUED, Job.State.SUBMITTED)
    assert "shares its queue fairly among its members" in again.pending_reason

    def reported():
        cluster_check_drift(cluster_id=w["cluster"].pk)
        return team_member_fair_share(team=w["vision"])["reported"]

    assert wait_until(reported, timeout=10)
    card = team_member_fair_share(team=w["vision"])
    usage = {m["username"]: m["consumed_gpus"] for m in card["members"]}
    assert usage["alice"] > usage["bob"] >= 0
    assert Decimal(str(usage["alice"])) > 0


def test_from_the_team_page(jw, client):
    url = reverse("team-member-fair-sharing", args=["vision"])
    client.force_login(jw["alice"])
    assert client.post(url, {"enabled": "on"}).status_code == 403
    jw["vision"].refresh_from_db()
    assert not jw["vision"].member_fair_sharing  # refused: a member may not
    page = client.get(reverse("team-detail", args=["vision"])).content.decode()
    assert 'data-testid="member-share"' not in page  # off, and nothing for her to change
    client.force_login(jw["maria"])
    page = client.post(url, {"enabled": "on", "weight-bob": "lots"}, follow=True).content.decode()
    assert "Enter a number, e.g. 2 or 0.5." in page
    jw["vision"].refresh_from_db()
    assert not jw["vision"].member_fair_sharing  # nothing half-written
    client.post(url, {"enabled": "on", "weight-bob": "2", "weight-alice": "1"})
    jw["vision"].refresh_from_db()
    assert jw["vision"].member_fair_sharing
    assert Membership.objects.get(user=jw["bob"], team=jw["vision"]).fair_share_weight == 2
    client.force_login(jw["alice"])
    page = client.get(reverse("team-detail", args=["vision"])).content.decode()
    assert "shares its queue fairly among its members" in page
    assert 'data-member="bob"' in page and "member-share-form" not in page
    client.force_login(jw["maria"])
    client.post(url, {"weight-bob": "2", "weight-alice": "1"})  # the box unticked: off again
    jw["vision"].refresh_from_db()
    assert not jw["vision"].member_fair_sharing
