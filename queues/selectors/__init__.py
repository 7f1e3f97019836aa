"""Reads, one module per concern; tenancy's selectors (who sees what) are re-exported here."""

from queues.selectors.tenancy import (
    api_token_list,
    department_list,
    membership_list,
    team_get,
    team_list,
    team_role,
    user_is_team_lead,
    user_list,
    user_manages_team,
    user_roles,
)

__all__ = [
    "api_token_list",
    "department_list",
    "membership_list",
    "team_get",
    "team_list",
    "team_role",
    "user_is_team_lead",
    "user_list",
    "user_manages_team",
    "user_roles",
]
