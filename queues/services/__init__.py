"""Writes, one module per concern (tenancy, quotas, jobs, job_apply, job_sync, ...)."""
