"""Demo data: departments, teams and users of every role. Idempotent."""

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction

from queues.models import Department, Membership, Team
from queues.roles import GROUP_FINANCE, GROUP_MANAGERS, GROUP_PLATFORM_ADMINS, ROLE_GROUPS

DEMO_PASSWORD = "quartermaster"

DEPARTMENTS = [
    {"slug": "research", "name": "Research", "managers": ["maria"]},
    {"slug": "product", "name": "Product Engineering", "managers": ["pablo"]},
]
TEAMS = [
    {"slug": "vision", "name": "Vision", "department": "research", "cost_centre": "CC-1010"},
    {"slug": "nlp", "name": "Language", "department": "research", "cost_centre": "CC-1020"},
    {"slug": "speech", "name": "Speech", "department": "research", "cost_centre": "CC-1030"},
    {
        "slug": "recsys",
        "name": "Recommendations",
        "department": "product",
        "cost_centre": "CC-2010",
    },
    {"slug": "robotics", "name": "Robotics", "department": "product", "cost_centre": "CC-2020"},
]
# username: (first name, last name, groups, [(team, role)])
USERS = {
    "alice": ("Alice", "Researcher", [], [("vision", "member")]),
    "bob": ("Bob", "Lead", [], [("vision", "lead")]),
    "carol": ("Carol", "Linguist", [], [("nlp", "member")]),
    "dave": ("Dave", "Lead", [], [("nlp", "lead")]),
    "sam": ("Sam", "Speaker", [], [("speech", "lead")]),
    "rita": ("Rita", "Recommender", [], [("recsys", "lead")]),
    "otto": ("Otto", "Roboticist", [], [("robotics", "lead"), ("vision", "member")]),
    "maria": ("Maria", "Manager", [GROUP_MANAGERS], []),
    "pablo": ("Pablo", "Manager", [GROUP_MANAGERS], []),
    "frank": ("Frank", "Finance", [GROUP_FINANCE], []),
    "admin": ("Ada", "Admin", [GROUP_PLATFORM_ADMINS], []),
}


@transaction.atomic
def seed_people() -> dict:
    """Create or update the demo groups, users, departments, teams and memberships."""
    User = get_user_model()
    groups = {name: Group.objects.get_or_create(name=name)[0] for name in ROLE_GROUPS}
    users = {}
    for username, (first, last, group_names, _) in USERS.items():
        user, _ = User.objects.update_or_create(
            username=username,
            defaults={
                "first_name": first,
                "last_name": last,
                "email": f"{username}@example.org",
                "is_staff": username == "admin",
                "is_superuser": username == "admin",
            },
        )
        user.set_password(DEMO_PASSWORD)
        user.save(update_fields=["password"])
        user.groups.set([groups[g] for g in group_names])
        users[username] = user
    departments = {}
    for spec in DEPARTMENTS:
        dept, _ = Department.objects.update_or_create(
            slug=spec["slug"], defaults={"name": spec["name"]}
        )
        dept.managers.set([users[u] for u in spec["managers"]])
        departments[spec["slug"]] = dept
    teams = {}
    for spec in TEAMS:
        team, _ = Team.objects.update_or_create(
            slug=spec["slug"],
            defaults={
                "name": spec["name"],
                "namespace": f"team-{spec['slug']}",
                "cost_centre": spec["cost_centre"],
                "department": departments[spec["department"]],
            },
        )
        teams[spec["slug"]] = team
    for username, (_, _, _, memberships) in USERS.items():
        for team_slug, role in memberships:
            Membership.objects.update_or_create(
                user=users[username], team=teams[team_slug], defaults={"role": role}
            )
    return {"users": users, "departments": departments, "teams": teams}
