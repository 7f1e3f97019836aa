"""queues' models, one module per concern; import them from here."""

from queues.models.governance import (
    AuditEvent,
    ManagedObject,
    PriorityTier,
    Quota,
    QuotaRequest,
)
from queues.models.jobs import ApprovalPolicy, Job, JobPod, JobTransition
from queues.models.tenancy import ApiToken, Department, Membership, Team

__all__ = [
    "ApiToken",
    "ApprovalPolicy",
    "AuditEvent",
    "Department",
    "Job",
    "JobPod",
    "JobTransition",
    "ManagedObject",
    "Membership",
    "PriorityTier",
    "Quota",
    "QuotaRequest",
    "Team",
]
