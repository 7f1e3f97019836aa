"""Job templates: a team's saved job specs. Members save one from a job (or a spec) and start
new jobs from it; the one who saved it, a lead of the team or a platform admin deletes it."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction

from core.roles import is_platform_admin
from queues.models import Job, JobTemplate, Team
from queues.selectors.tenancy import team_role, user_is_team_lead
from queues.services.audit import audit
from queues.services.jobs.submit import job_spec
from queues.validators.jobs import job_validate

NAME_MAX = 100


def _stored(values: dict) -> dict:
    """The spec as JSON, in the submission's fields: pool and tier by name, CPU and memory
    as Kubernetes quantities."""
    spec = job_spec(Job(**values))
    return {
        **spec,
        "pool": values["pool"].name if values.get("pool") else "any",
        "tier": values["tier"].name if values.get("tier") else None,
    }


def job_template_save(*, actor, team: Team, name: str, spec: dict) -> JobTemplate:
    """Save a spec (validated as a submission would be) under a name, for the team."""
    if team_role(user=actor, team=team) is None:
        raise PermissionDenied("Only members of the team save templates for it.")
    name = " ".join((name or "").split())
    if not name:
        raise ValidationError({"name": "Give the template a name."})
    if len(name) > NAME_MAX:
        raise ValidationError({"name": f"Use at most {NAME_MAX} characters."})
    values = job_validate(team=team, **{"name": None, "image": None, "command": None, **spec})
    try:
        with transaction.atomic():
            template = JobTemplate.objects.create(
                team=team, name=name, spec=_stored(values), created_by=actor
            )
            audit(actor=actor, verb="job_template.create", obj=template, team=team,
                  after=template.spec)  # fmt: skip
    except IntegrityError as exc:
        raise ValidationError(
            {"name": f"{team.name} already has a template named “{name}”; pick another name."}
        ) from exc
    return template


def job_template_from_job(*, actor, job: Job, name: str) -> JobTemplate:
    """Save an existing job's spec as a template of its team."""
    return job_template_save(actor=actor, team=job.team, name=name, spec=job_spec(job))


def job_template_can_delete(*, user, template: JobTemplate) -> bool:
    return (
        template.created_by_id == user.pk
        or is_platform_admin(user)
        or user_is_team_lead(user=user, team=template.team)
    )


def job_template_delete(*, actor, template: JobTemplate) -> None:
    if not job_template_can_delete(user=actor, template=template):
        raise PermissionDenied(
            "Only whoever saved the template, a lead of the team or a platform admin deletes it."
        )
    with transaction.atomic():
        audit(actor=actor, verb="job_template.delete", obj=template, team=template.team,
              before=template.spec)  # fmt: skip
        template.delete()
