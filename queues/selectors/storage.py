"""Reads of team volumes and secrets: the team's members see them; leads change them."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db.models import QuerySet

from core.roles import is_platform_admin
from fleet.models import Cluster
from queues.models import ManagedObject, Team, TeamSecret, TeamVolume
from queues.selectors.jobs import job_cluster_id, job_team_for


def team_pull_secret_names(*, team_id: int, cluster_id: int) -> list[str]:
    """The team's image pull secrets on a cluster: every job of the team there names them."""
    return pull_secret_names(pairs={(team_id, cluster_id)}).get((team_id, cluster_id), [])


def pull_secret_names(*, pairs) -> dict[tuple[int, int], list[str]]:
    """Image pull secret names per (team id, cluster id), for all the pairs in one query."""
    pairs = {p for p in pairs if None not in p}
    if not pairs:
        return {}
    rows = TeamSecret.objects.filter(
        kind=TeamSecret.Kind.REGISTRY,
        team_id__in={t for t, _ in pairs},
        cluster_id__in={c for _, c in pairs},
    ).order_by("name")
    out: dict[tuple[int, int], list[str]] = {}
    for team_id, cluster_id, name in rows.values_list("team_id", "cluster_id", "name"):
        if (team_id, cluster_id) in pairs:
            out.setdefault((team_id, cluster_id), []).append(name)
    return out


def _visible_teams(user) -> QuerySet[Team]:
    if not user.is_authenticated:
        return Team.objects.none()
    if is_platform_admin(user):
        return Team.objects.all()
    return Team.objects.filter(memberships__user=user)


def volume_list(*, user) -> QuerySet[TeamVolume]:
    """Volumes of the teams the user is in (every team's for platform admins)."""
    return TeamVolume.objects.filter(team__in=_visible_teams(user)).select_related(
        "team", "cluster", "created_by"
    )


def secret_list(*, user) -> QuerySet[TeamSecret]:
    """Secrets (names, keys, fingerprints; never values) of the user's teams."""
    return TeamSecret.objects.filter(team__in=_visible_teams(user)).select_related(
        "team", "cluster", "updated_by"
    )


def storage_team_for(*, user, slug: str) -> Team:
    """The team a volume or secret is for: a team of the caller's (platform admins: any)."""
    if slug and is_platform_admin(user):
        team = Team.objects.filter(slug=slug).first()
        if team is None:
            raise ValidationError({"team": f"No team {slug[:63]!r}."})
        return team
    return job_team_for(user=user, slug=slug)


def storage_cluster_for(*, team: Team, name: str) -> Cluster:
    """The named cluster, or the one the team's jobs run on (see job_cluster_id)."""
    live = Cluster.objects.filter(deleted_at__isnull=True)
    if name:
        cluster = live.filter(name=name).first()
        if cluster is None:
            raise ValidationError({"cluster": f"No cluster named {name[:63]!r}."})
        return cluster
    cluster = live.filter(pk=job_cluster_id(team=team, pool=None)).first()
    if cluster is None:
        raise ValidationError({"cluster": "No cluster is registered yet; ask a platform admin."})
    return cluster


def volume_states(*, volumes: list[TeamVolume]) -> dict[int, str]:
    """Per volume id, its claim as last seen in the cluster (one query): "Bound", "Pending",
    "Creating" before the first apply, or the cluster's refusal."""
    if not volumes:
        return {}
    rows = ManagedObject.objects.filter(
        kind="PersistentVolumeClaim",
        cluster_id__in={v.cluster_id for v in volumes},
        name__in={v.name for v in volumes},
    ).only("cluster_id", "namespace", "name", "live_status", "applied_generation", "last_error")
    by_key = {(r.cluster_id, r.namespace, r.name): r for r in rows}
    states = {}
    for volume in volumes:
        row = by_key.get((volume.cluster_id, volume.team.namespace, volume.name))
        if row is None or (not row.applied_generation and not row.last_error):
            states[volume.pk] = "Creating"
        elif row.last_error and not row.applied_generation:
            states[volume.pk] = f"Error: {row.last_error}"
        else:
            states[volume.pk] = (row.live_status or {}).get("phase") or "Created"
    return states


def team_guardrails(*, team: Team) -> list[dict]:
    """Per cluster, the guard rails of the team's namespace as rendered and, for its
    ResourceQuota, what the cluster last reported in use (from the drift check)."""
    from queues.manifests.guardrails import GUARDRAIL_KINDS, LIMIT_RANGE, RESOURCE_QUOTA

    rows = (
        ManagedObject.objects.filter(
            owner_type="team", owner_id=team.pk, kind__in=GUARDRAIL_KINDS,
            cluster__deleted_at__isnull=True,
        )
        .select_related("cluster")
        .order_by("cluster__name", "kind", "name")
    )  # fmt: skip
    out: dict[int, dict] = {}
    for row in rows:
        entry = out.setdefault(row.cluster_id, {
            "cluster": row.cluster.name, "applied": True, "policies": [], "groups": [],
        })  # fmt: skip
        entry["applied"] &= row.applied_generation >= row.desired_generation
        spec = row.desired.get("spec") or {}
        if row.kind == "ResourceQuota" and row.name == RESOURCE_QUOTA:
            hard = spec.get("hard") or {}
            used = (row.live_status or {}).get("used") or {}
            entry["gpus"] = {"limit": hard.get("requests.nvidia.com/gpu"),
                             "used": used.get("requests.nvidia.com/gpu")}  # fmt: skip
            entry["pods"] = {"limit": hard.get("pods"), "used": used.get("pods")}
        elif row.kind == "LimitRange" and row.name == LIMIT_RANGE:
            limit = (spec.get("limits") or [{}])[0]
            entry["defaults"] = limit.get("defaultRequest") or {}
        elif row.kind == "NetworkPolicy":
            entry["policies"].append(row.name)
        elif row.kind == "RoleBinding":
            # The team's groups (not the portal's own accounts, bound beside them).
            subjects = row.desired.get("subjects") or []
            entry["groups"] += [s["name"] for s in subjects if s.get("kind") == "Group"]
    return list(out.values())
