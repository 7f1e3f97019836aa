"""The group claim mapped to memberships and roles at each sign-in: only what the map names is
managed (a hand-made membership elsewhere stays), a group that goes away takes its grant with
it, changes are audited and a sign-in that changes nothing is not; without a reachable
provider the sign-in button says so instead of failing."""

import pytest
from django.urls import reverse

from queues.models import AuditEvent, Membership
from sso import oidc

ROLE_MAP = {
    "gpu-vision-leads": ["team:vision:lead"], "gpu-vision": "team:vision:member",
    "research-managers": "manager:research", "finance-team": "finance",
    "platform": "platform-admin",
}  # fmt: skip


@pytest.fixture
def mapped(settings, world):
    settings.OIDC_ROLE_MAP = ROLE_MAP
    return world


def test_groups_become_memberships_and_roles_and_only_mapped_ones_are_managed(mapped):
    carol = mapped["carol"]  # a member of nlp by hand; nlp is not in the map
    result = oidc.roles_apply(user=carol, groups=["gpu-vision-leads", "finance-team"])
    assert result["after"] == ["finance", "team:vision:lead"]
    assert Membership.objects.get(user=carol, team=mapped["vision"]).role == "lead"
    assert Membership.objects.get(user=carol, team=mapped["nlp"]).role == "member"
    assert carol.groups.filter(name="finance").exists()
    # The lead group goes, the member group stays: the membership steps down; finance goes.
    result = oidc.roles_apply(user=carol, groups=["gpu-vision"])
    assert (result["before"], result["after"]) == (
        ["finance", "team:vision:lead"],
        ["team:vision:member"],
    )
    assert Membership.objects.get(user=carol, team=mapped["vision"]).role == "member"
    assert not carol.groups.filter(name="finance").exists()
    assert AuditEvent.objects.filter(verb="sso.roles").count() == 2
    oidc.roles_apply(user=carol, groups=["gpu-vision"])  # nothing changes: nothing audited
    assert AuditEvent.objects.filter(verb="sso.roles").count() == 2
    oidc.roles_apply(user=carol, groups=["research-managers", "platform"])
    assert list(carol.managed_departments.all()) == [mapped["research"]]
    assert {g.name for g in carol.groups.all()} == {"managers", "platform-admins"}
    assert not Membership.objects.filter(user=carol, team=mapped["vision"]).exists()


def test_the_sign_in_button_says_when_the_provider_does_not_answer(client, settings, db):
    settings.OIDC_ISSUER = "http://127.0.0.1:9/unreachable"
    settings.OIDC_RP_CLIENT_ID = "quartermaster"
    settings.OIDC_PROVIDER_NAME = "Acme"
    answer = client.get(reverse("oidc_authentication_init"), follow=True)
    assert answer.status_code == 200
    assert "Acme does not answer now" in answer.content.decode()


def test_a_password_sign_in_works_while_the_provider_does_not_answer(client, settings, world):
    """Django builds the single sign-on backend for a password sign-in too; a provider down (or
    still starting, as the demo's in its first seconds) must not make that a server error."""
    settings.OIDC_ISSUER = "http://127.0.0.1:9/unreachable"
    settings.OIDC_RP_CLIENT_ID = "quartermaster"
    settings.AUTHENTICATION_BACKENDS = [*settings.AUTHENTICATION_BACKENDS,
                                        "sso.oidc.PortalOIDCBackend"]  # fmt: skip
    oidc._discovery.update(at=0.0, document={}, issuer=None)
    alice = world["alice"]
    alice.set_password("right-password")
    alice.save()
    wrong = client.post(reverse("login"), {"username": "alice", "password": "wrong"})
    assert wrong.status_code == 200 and wrong.context["form"].errors
    right = client.post(reverse("login"), {"username": "alice", "password": "right-password"})
    assert right.status_code == 302
    assert client.get(reverse("home")).context["user"] == alice
    # Coming back from the provider without it answering: no user, a message, not an error.
    back = client.get(reverse("oidc_authentication_callback"), {"code": "c", "state": "s"})
    assert back.status_code == 302


def test_without_single_sign_on_its_urls_are_not_found(client, settings, db):
    settings.OIDC_ISSUER = ""
    assert client.get(reverse("oidc_authentication_init")).status_code == 404
    assert client.get(reverse("oidc_authentication_callback")).status_code == 404
