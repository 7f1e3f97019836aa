"""Writes, one module per concern (tenancy, quotas, jobs, job_sync, reconcile, audit, ...)."""
