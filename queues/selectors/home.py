"""What each role's home page shows: the next things that user has to look at."""

from __future__ import annotations

from datetime import date

from django.db.models import F

from core.selectors import worker_status
from fleet.models import Cluster
from queues.models import ManagedObject
from queues.selectors.approvers import jobs_awaiting_decision
from queues.selectors.jobs import job_list
from queues.selectors.quotas import decision_queue
from queues.selectors.tenancy import team_hold_text, user_roles

ACTIVE_STATES = ("pending_approval", "submitted", "queued", "admitted", "running", "preempted")


def _last_month(today: date) -> str:
    year, month = (today.year, today.month - 1) if today.month > 1 else (today.year - 1, 12)
    return f"{year:04d}-{month:02d}"


def home_summary(*, user, today: date) -> dict:
    """Roles plus, per role, the few items that need the user: jobs, approvals, decisions."""
    roles = user_roles(user=user)
    summary = {
        "roles": roles,
        "my_jobs": list(job_list(user=user).filter(owner=user)[:5]),
        "my_active_jobs": job_list(user=user).filter(owner=user, state__in=ACTIVE_STATES).count(),
        # Nobody decides their own request; what nobody else can decide comes up a level.
        "held_jobs": list(jobs_awaiting_decision(user=user)[:10]),
        "decisions": list(decision_queue(user=user)[:10]),
        "last_month": _last_month(today),
        "cluster_errors": [],
        "lagging_objects": 0,
        # The user's teams whose queue is held: nothing they submit starts until released.
        "holds": [
            (m.team, team_hold_text(team=m.team))
            for m in roles["memberships"]
            if m.team.queue_hold_reason
        ],
    }
    if roles["is_platform_admin"]:
        summary["workers"] = worker_status()
        summary["cluster_errors"] = list(
            Cluster.objects.filter(deleted_at__isnull=True).exclude(last_sync_error="")
        )
        summary["lagging_objects"] = ManagedObject.objects.filter(
            applied_generation__lt=F("desired_generation")
        ).count()
    return summary
