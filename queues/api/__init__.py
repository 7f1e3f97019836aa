"""The REST API of queues: tenancy, quotas and jobs under /api/v1/."""
