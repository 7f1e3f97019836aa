import pytest
from django.core.exceptions import ValidationError
from django.db import DataError, IntegrityError, transaction
from django.db.models import ProtectedError

from fleet.validators import to_dns1123_label
from queues.models import Membership, Team
from tests.factories import DepartmentFactory, MembershipFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("slug", ["Vision", "vision_1", "-vision", "vision-", "", "a" * 64, "é"])
def test_team_slug_must_be_dns1123_in_validation_and_database(slug):
    department = DepartmentFactory()
    team = Team(slug=slug, name="x", namespace="ok-ns", department=department)
    with pytest.raises(ValidationError) as err:
        team.full_clean()
    assert "slug" in err.value.message_dict
    # The database refuses it too, even when validation is bypassed.
    with pytest.raises((IntegrityError, DataError)), transaction.atomic():
        Team.objects.create(slug=slug, name="x", namespace="ok-ns", department=department)


@pytest.mark.parametrize("slug", ["vision", "nlp-2", "a", "a" * 63, "0team"])
def test_valid_dns1123_slugs_are_accepted(slug):
    team = TeamFactory(slug=slug, namespace=slug)
    team.full_clean()


def test_team_slug_and_namespace_are_unique():
    TeamFactory(slug="vision", namespace="ns-vision")
    with pytest.raises(IntegrityError), transaction.atomic():
        TeamFactory.create(slug="vision2", namespace="ns-vision")
    with pytest.raises(IntegrityError), transaction.atomic():
        Team.objects.create(
            slug="vision", name="dup", namespace="other", department=DepartmentFactory()
        )


def test_department_slug_checked_by_database():
    with pytest.raises(IntegrityError), transaction.atomic():
        DepartmentFactory(slug="Not Valid")


def test_membership_unique_per_user_and_team_and_role_checked():
    m = MembershipFactory()
    with pytest.raises(IntegrityError), transaction.atomic():
        Membership.objects.create(user=m.user, team=m.team, role="lead")
    with pytest.raises(IntegrityError), transaction.atomic():
        Membership.objects.create(user=UserFactory(), team=m.team, role="owner")


def test_department_with_teams_cannot_be_deleted():
    team = TeamFactory()
    with pytest.raises(ProtectedError):
        team.department.delete()


@pytest.mark.parametrize(
    ("text", "label"),
    [
        ("My Job_1", "my-job-1"),
        ("--x--", "x"),
        ("ÄÖ", "ao"),
        ("名前", "mingqian"),
        ("🚀", "rocket"),
        ("\u200b", "x"),
        ("a" * 80, "a" * 63),
    ],
)
def test_to_dns1123_label(text, label):
    assert to_dns1123_label(text) == label
