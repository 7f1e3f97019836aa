"""Demo data of queues: departments, teams and users of every role; priority tiers, quotas for
every demo team and an approval policy. Idempotent: existing tiers are brought back to the demo
values, but quotas that already exist are left alone (a manager may have changed them since)."""

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction

from core.roles import GROUP_FINANCE, GROUP_MANAGERS, GROUP_PLATFORM_ADMINS, ROLE_GROUPS
from fleet.models import Cluster, NodePool
from queues.models import (
    ApprovalPolicy,
    Department,
    Membership,
    PriorityTier,
    Quota,
    Team,
    TeamVolume,
)
from queues.services.reconcile import managed_objects_sync, reconcile_all_enqueue
from queues.services.storage import volume_create

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


# name: (value, preemptible, default, description)
TIERS = {
    "production": (1000, False, False, "Production training and serving"),
    "experiment-high": (500, True, False, "Urgent experiments (deadlines)"),
    "experiment": (100, True, True, "Everyday experiments"),
    "development": (10, True, False, "Notebooks and debugging; first to be preempted"),
}

# team slug: {pool: (nominal, borrowing limit, lending limit)}. Sized to the demo fleet
# (a100 32, h100 16, l4 16 GPUs, a100-mig 56 instances, l4-shared 16 shares, l4-spot 8 GPUs;
# lab's l40s 8 GPUs) so that every team can run a job at once; the MIG, time-sliced, spot and
# lab pools are for some teams only.
QUOTAS = {
    "vision": {"a100": (8, 8, None), "l4": (4, 4, None), "a100-mig": (14, 14, None),
               "l4-spot": (4, 4, None), "l40s": (4, 4, None)},
    "nlp": {"a100": (8, 8, None), "h100": (4, 4, None), "a100-mig": (14, 14, None)},
    "speech": {"a100": (4, 4, None), "l4": (4, 4, None), "l4-shared": (8, 8, None)},
    "recsys": {"l4": (4, 4, None), "h100": (4, 4, 2), "l4-shared": (8, 8, None)},
    "robotics": {"a100": (8, 4, None), "l4": (4, 2, None), "l4-spot": (4, 4, None),
                 "l40s": (4, 4, None)},
}  # fmt: skip


def _default_cluster() -> Cluster | None:
    return Cluster.objects.filter(is_default=True).first() or Cluster.objects.first()


# Teams that share their queue fairly among their members (Kueue's admission fair sharing), set
# when their quotas are first made (a manager may turn it off in the demo and it stays off).
MEMBER_FAIR_SHARING = ("nlp",)


@transaction.atomic
def seed_quotas() -> dict:
    """Tiers, quotas for every demo team in the demo clusters' pools, an approval policy;
    the Language team shares its queue fairly among its members."""
    PriorityTier.objects.filter(is_default=True).exclude(name="experiment").update(is_default=False)
    tiers = {}
    for name, (value, preemptible, default, description) in TIERS.items():
        tiers[name], _ = PriorityTier.objects.update_or_create(
            name=name,
            defaults={
                "value": value,
                "preemptible": preemptible,
                "is_default": default,
                "description": description,
            },
        )
    cluster = _default_cluster()
    quotas = 0
    if cluster is not None:
        # The default cluster's pools, and the other demo clusters' where the name is theirs.
        pools = {p.name: p for p in NodePool.objects.exclude(cluster=cluster)}
        pools.update({p.name: p for p in NodePool.objects.filter(cluster=cluster)})
        teams = {t.slug: t for t in Team.objects.filter(slug__in=QUOTAS)}
        for slug, per_pool in QUOTAS.items():
            for pool_name, (nominal, borrowing, lending) in per_pool.items():
                if slug not in teams or pool_name not in pools:
                    continue
                _, created = Quota.objects.get_or_create(
                    team=teams[slug],
                    pool=pools[pool_name],
                    defaults={
                        "nominal_gpus": nominal,
                        "borrowing_limit": borrowing,
                        "lending_limit": lending,
                    },
                )
                quotas += created
                if created and slug in MEMBER_FAIR_SHARING:
                    Team.objects.filter(pk=teams[slug].pk).update(member_fair_sharing=True)
    if not ApprovalPolicy.objects.exists():
        policy = ApprovalPolicy.objects.create(
            max_gpus_without_approval=16, max_runtime_seconds_without_approval=7 * 24 * 3600
        )
        policy.tiers_needing_approval.set([tiers["production"]])
    for item in Cluster.objects.all():
        managed_objects_sync(cluster=item)
    reconcile_all_enqueue()
    return {"tiers": len(tiers), "quotas_created": quotas, "cluster": cluster}


# team: (lead who makes it, volume name, GiB): where the team's spot jobs keep checkpoints.
CHECKPOINT_VOLUMES = {"vision": ("bob", "checkpoints", 50), "robotics": ("otto", "checkpoints", 50)}


def seed_storage() -> int:
    """A checkpoint volume for the teams with spot quota on the default cluster, so that a spot
    job can resume after its node is taken back (made once; a lead may delete it)."""
    cluster = _default_cluster()
    made = 0
    for slug, (lead, name, size) in CHECKPOINT_VOLUMES.items():
        team = Team.objects.filter(slug=slug).first()
        if cluster is None or team is None:
            continue
        if TeamVolume.objects.filter(team=team, cluster=cluster, name=name).exists():
            continue
        actor = get_user_model().objects.get(username=lead)
        volume_create(actor=actor, team=team, cluster=cluster, name=name, size_gib=size)
        made += 1
    return made


# Reservations of the demo (team, lead, manager, pool, GPUs, start and end from now in hours,
# state, why): one in its window now, one waiting for a manager, one ended last month (billed).
# All in H100, where neither team has quota of its own: a reservation there changes no other
# team's queue, so the history Kueue's rules made without them replays as it was.
RESERVATIONS = [
    ("vision", "bob", "maria", "h100", 4, -2, 22, "active",
     "CVPR camera-ready: final ablations of the detector on H100."),
    ("speech", "sam", "maria", "h100", 4, 24 * 6, 24 * 6 + 12, "pending",
     "Nightly evaluation batch for the release candidate."),
    ("vision", "bob", "maria", "h100", 4, None, None, "ended",
     "Workshop deadline: last month's sweep."),
]  # fmt: skip


@transaction.atomic
def seed_reservations(*, now=None) -> int:
    """The demo's reservations (made once: none is added where the demo made some already),
    each with the audit events its life would have left."""
    from datetime import timedelta

    from django.utils import timezone

    from queues.models import Reservation
    from queues.services.audit import audit
    from queues.services.reconcile import reconcile_cluster_enqueue

    if Reservation.objects.filter(reason__in=[r[-1] for r in RESERVATIONS]).exists():
        return 0
    now = (now or timezone.now()).replace(minute=0, second=0, microsecond=0)
    last_month = (now.replace(day=1) - timedelta(days=1)).replace(day=10, hour=8)
    users = {u.username: u for u in get_user_model().objects.filter(username__in=USERS)}
    made = 0
    for slug, lead, manager, pool_name, gpus, start_h, end_h, state, why in RESERVATIONS:
        team = Team.objects.filter(slug=slug).first()
        pool = NodePool.objects.filter(name=pool_name).first()
        if team is None or pool is None:
            continue
        if start_h is None:
            starts, ends = last_month, last_month + timedelta(hours=8)
        else:
            starts, ends = now + timedelta(hours=start_h), now + timedelta(hours=end_h)
        decided = state != "pending"
        r = Reservation.objects.create(
            team=team, pool=pool, gpus=gpus, starts_at=starts, ends_at=ends, reason=why,
            state=state, requested_by=users[lead],
            decided_by=users[manager] if decided else None,
            decided_at=starts - timedelta(days=2) if decided else None,
            holding_since=starts - timedelta(hours=1) if decided else None,
            activated_at=starts if decided else None,
            finished_at=ends if state == "ended" else None,
        )  # fmt: skip
        steps = [("reservation.request", users[lead])]
        if decided:
            steps += [("reservation.approve", users[manager]), ("reservation.hold", None),
                      ("reservation.activate", None)]  # fmt: skip
        if state == "ended":
            steps.append(("reservation.expire", None))
        for verb, actor in steps:
            audit(actor=actor, verb=verb, obj=r, team=team, message=f"Demo: {why}")
        if state == "active":
            reconcile_cluster_enqueue(pool.cluster_id)
        made += 1
    return made
