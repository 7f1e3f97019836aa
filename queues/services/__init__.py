"""Writes, one module per concern (tenancy, quotas, reconcile, ...); jobs/ by stage."""
