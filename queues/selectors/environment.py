"""Who reads the values of a job's environment: its team's members and platform admins. Others
who see the job (its department's managers, finance) see the variables' names only, in every
place that holds them: jobs, job templates, sweep grids and the audit events about them."""

from __future__ import annotations

from core.roles import is_platform_admin
from queues.models import Membership


def env_readers(*, user) -> tuple[frozenset[int], bool]:
    """(ids of the teams whose environment values the user reads, reads every team's)."""
    if user is None or not user.is_authenticated:
        return frozenset(), False
    if is_platform_admin(user):
        return frozenset(), True
    teams = Membership.objects.filter(user=user).values_list("team_id", flat=True)
    return frozenset(teams), False


def env_readable(readers: tuple[frozenset[int], bool], team_id: int | None) -> bool:
    teams, everything = readers
    return everything or team_id in teams


def env_hidden(value, mask=None):
    """The value with what every "env" object in it maps to replaced by `mask`, at any depth
    (a job spec's {"env": {NAME: value}}, a sweep grid's {"env": {NAME: [values]}})."""
    if isinstance(value, dict):
        return {
            key: dict.fromkeys(item, mask)
            if key == "env" and isinstance(item, dict)
            else env_hidden(item, mask)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [env_hidden(item, mask) for item in value]
    return value
