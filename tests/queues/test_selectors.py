import pytest

from queues.selectors import tenancy as selectors


def slugs(qs):
    return sorted(t.slug for t in qs)


@pytest.mark.django_db
def test_researcher_sees_only_their_teams(world):
    assert slugs(selectors.team_list(user=world["alice"])) == ["vision"]
    assert slugs(selectors.team_list(user=world["carol"])) == ["nlp"]
    assert [d.slug for d in selectors.department_list(user=world["alice"])] == ["research"]


@pytest.mark.django_db
def test_manager_sees_their_department(world):
    assert slugs(selectors.team_list(user=world["maria"])) == ["nlp", "vision"]
    assert slugs(selectors.team_list(user=world["pablo"])) == ["recsys"]


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["frank", "admin"])
def test_finance_and_admins_see_everything(world, who):
    assert slugs(selectors.team_list(user=world[who])) == ["nlp", "recsys", "vision"]
    assert len(selectors.department_list(user=world[who])) == 2


@pytest.mark.django_db
def test_membership_visibility_follows_teams(world):
    visible = {
        (m.user.username, m.team.slug) for m in selectors.membership_list(user=world["alice"])
    }
    assert visible == {("alice", "vision"), ("bob", "vision")}


@pytest.mark.django_db
def test_team_list_has_no_duplicates_for_member_who_also_manages(world):
    world["research"].managers.add(world["alice"])
    assert slugs(selectors.team_list(user=world["alice"])) == ["nlp", "vision"]


@pytest.mark.django_db
def test_user_roles_summary(world):
    roles = selectors.user_roles(user=world["bob"])
    assert roles["is_lead"] and not roles["is_manager"] and not roles["is_finance"]
    assert selectors.user_roles(user=world["maria"])["is_manager"]
    assert selectors.user_roles(user=world["admin"])["is_platform_admin"]
