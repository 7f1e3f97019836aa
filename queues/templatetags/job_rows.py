"""The rows of a job list, rendered in Python: a page of fifty rows through the template engine
cost more than every query of the page together (bench.reads_at_scale)."""

from html import escape

from django import template
from django.urls import reverse
from django.utils import timezone
from django.utils.safestring import mark_safe

from queues.models import Job

register = template.Library()

STATE_LABELS = {value: str(label) for value, label in Job.State.choices}


def _cells(job) -> tuple:
    """(pk, name, state, queue position, GPUs, team, owner, pool or None, tier, created) of a
    Job, or of a row of job_list_rows (a named tuple of LIST_FIELDS)."""
    if isinstance(job, Job):
        pool = job.admitted_pool or job.pool
        return (
            job.pk, job.name, job.state, job.queue_position, job.total_gpus, job.team.name,
            job.owner.username, pool.name if pool else None, job.tier.name, job.created_at,
        )  # fmt: skip
    return (
        job.pk, job.name, job.state, job.queue_position, job.workers * job.gpus_per_worker,
        job.team__name, job.owner__username, job.admitted_pool__name or job.pool__name,
        job.tier__name, job.created_at,
    )  # fmt: skip


def _row(cells: tuple, base: str) -> str:
    # html.escape is what django.utils.html.escape does, on every text (ids and numbers need
    # none), once each.
    pk, name, state, position, gpus, team, owner, pool, tier, created = cells
    badge, label = Job.STATE_BADGES.get(state, ""), escape(STATE_LABELS.get(state, state))
    name, state = escape(name), escape(state)
    return (
        f'<tr><td><a class="truncate" href="{base}{pk}/" title="{name}">{name}</a> '
        f'<span class="muted">#{pk}</span></td><td>{escape(team)}</td><td>{escape(owner)}</td>'
        f'<td><span class="badge job-state job-state-{state} {badge}" '
        f'data-testid="job-state">{label}</span>'
        + (f' <span class="muted">#{position} in queue</span>' if position else "")
        + f'</td><td class="num">{gpus}</td><td>{escape(pool) if pool else "any"}</td>'
        f"<td>{escape(tier)}</td><td>{timezone.localtime(created):%Y-%m-%d %H:%M}</td></tr>"
    )


@register.simple_tag
def job_rows(jobs):
    """<tr> rows for templates/queues/jobs/_table.html (every value escaped)."""
    base = escape(reverse("job-list"))
    return mark_safe("\n".join(_row(_cells(job), base) for job in jobs))
