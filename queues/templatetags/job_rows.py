"""The rows of a job list, rendered in Python: a page of fifty rows through the template engine
cost more than every query of the page together (bench.reads_at_scale)."""

from django import template
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

register = template.Library()

ROW = (
    '<tr><td><a class="truncate" href="{}{}/" title="{}">{}</a> <span class="muted">#{}</span>'
    "</td><td>{}</td><td>{}</td><td>"
    '<span class="badge job-state job-state-{} {}" data-testid="job-state">{}</span>{}</td>'
    '<td class="num">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>'
)


def _row(job, base: str) -> tuple:
    position = (
        format_html(' <span class="muted">#{} in queue</span>', job.queue_position)
        if job.queue_position
        else ""
    )
    pool = job.admitted_pool or job.pool
    return (
        base, job.pk, job.name, job.name, job.pk, job.team.name, job.owner.username, job.state,
        job.state_badge, job.get_state_display(), position, job.total_gpus,
        pool.name if pool else "any", job.tier.name,
        f"{timezone.localtime(job.created_at):%Y-%m-%d %H:%M}",
    )  # fmt: skip


@register.simple_tag
def job_rows(jobs):
    """<tr> rows for templates/queues/jobs/_table.html (every value escaped)."""
    base = reverse("job-list")
    return format_html_join("\n", ROW, (_row(job, base) for job in jobs))
