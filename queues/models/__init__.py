"""queues' models, one module per concern; import them from here."""

from queues.models.audit import AuditEvent
from queues.models.jobs import (
    ApprovalPolicy,
    Job,
    JobEvent,
    JobPod,
    JobTemplate,
    JobTransition,
    Sweep,
)
from queues.models.log_streams import LogStream
from queues.models.protection import JobCheckpoint, JobPreemption
from queues.models.quotas import PriorityTier, Quota, QuotaRequest
from queues.models.reconcile import ManagedObject
from queues.models.reservations import Reservation, ReservationSettings
from queues.models.storage import TeamSecret, TeamVolume
from queues.models.tenancy import ApiToken, Department, Membership, Team

__all__ = [
    "ApiToken",
    "ApprovalPolicy",
    "AuditEvent",
    "Department",
    "Job",
    "JobCheckpoint",
    "JobEvent",
    "JobPod",
    "JobPreemption",
    "JobTemplate",
    "JobTransition",
    "LogStream",
    "ManagedObject",
    "Membership",
    "PriorityTier",
    "Quota",
    "QuotaRequest",
    "Reservation",
    "ReservationSettings",
    "Sweep",
    "Team",
    "TeamSecret",
    "TeamVolume",
]
