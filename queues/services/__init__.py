"""Writes, one module per concern: tenancy (re-exported here), governance, reconcile, jobs."""

from queues.services.tenancy import (
    api_token_authenticate,
    api_token_create,
    api_token_revoke,
    department_create,
    membership_delete,
    membership_set,
    team_create,
)

__all__ = [
    "api_token_authenticate",
    "api_token_create",
    "api_token_revoke",
    "department_create",
    "membership_delete",
    "membership_set",
    "team_create",
]
