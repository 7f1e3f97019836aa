"""Job pages: the form with a live manifest preview, my jobs, team jobs, the queue, the job page
with live status, and the workflow buttons. Thin: parse, call a service or selector, render."""

import yaml
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from core.forms import add_service_errors
from core.pagination import keyset_page
from core.roles import is_platform_admin
from core.text import ascii_digits
from fleet import kube
from queues.backends import backend_of
from queues.filters import JobFilter
from queues.forms.jobs import (
    ApprovalPolicyForm,
    JobForm,
    form_initial_from_job,
    form_initial_from_template,
)
from queues.manifests import jobs as job_manifests
from queues.models import Job, Team
from queues.selectors import jobs as job_selectors
from queues.selectors.approvers import job_approvers
from queues.selectors.environment import env_hidden, env_readable, env_readers
from queues.selectors.protection import job_protection_shown
from queues.selectors.storage import team_pull_secret_names
from queues.selectors.tenancy import team_get, team_hold_text, team_role
from queues.services.jobs import events as job_events
from queues.services.jobs import idle, lifecycle, sweeps
from queues.services.jobs import logs as job_logs
from queues.services.jobs import submit as job_services
from queues.services.jobs.templates import job_template_delete, job_template_from_job
from queues.validators.jobs import job_validate

PAGE_SIZE = 50


def _job_or_404(request, pk, *, detail=False) -> Job:
    try:
        if detail:
            return job_selectors.job_detail(user=request.user, pk=pk)
        return job_selectors.job_get(user=request.user, pk=pk)
    except Job.DoesNotExist as exc:
        raise Http404("No such job.") from exc


def _team_or_404(request, slug) -> Team:
    try:
        return team_get(user=request.user, slug=slug)
    except Team.DoesNotExist as exc:
        raise Http404("No such team.") from exc


@login_required
def job_list(request):
    """The user's own jobs, newest first."""
    qs = job_selectors.job_list_rows(user=request.user).filter(owner=request.user)
    page = keyset_page(qs, before=request.GET.get("before"), size=PAGE_SIZE)
    # The side parts read only what they show: whole rows with their relations cost more to
    # build than to read.
    teams = job_selectors.user_job_teams(user=request.user).values("slug", "name")
    templates = job_selectors.job_templates(user=request.user).values(
        "pk", "name", "team__name", "created_by__username"
    )
    sweeps = job_selectors.sweep_list(user=request.user).filter(owner=request.user)
    recent_sweeps = sweeps.values("pk", "name")[:10]
    return render(
        request,
        "queues/jobs/list.html",
        {"page": page, "teams": teams, "templates": templates, "sweeps": recent_sweeps},
    )


@login_required
def team_jobs(request, slug):
    """A team's jobs, filtered by state, pool and user."""
    team = _team_or_404(request, slug)
    filterset = JobFilter(
        request.GET, queryset=job_selectors.job_list_rows(user=request.user).filter(team=team)
    )
    page = keyset_page(filterset.qs, before=request.GET.get("before"), size=PAGE_SIZE)
    return render(
        request, "queues/jobs/team.html", {"team": team, "filter": filterset, "page": page}
    )


@login_required
def job_queue(request, slug):
    """Waiting jobs of a team (per pool) in the order the cluster will admit them."""
    team = _team_or_404(request, slug)
    pools = list(job_selectors.team_job_pools(team=team))
    pool = next((p for p in pools if p.name == request.GET.get("pool")), None)
    return render(
        request,
        "queues/jobs/queue.html",
        {
            "team": team,
            "pools": pools,
            "pool": pool,
            "waiting": job_selectors.job_queue(team=team, pool=pool),
            "running": job_selectors.job_running(team=team, pool=pool),
            "summary": job_selectors.team_pool_summary(team=team),
        },
    )


@login_required
def job_create(request):
    """The job form; 'Resubmit' arrives with ?from=<id> and starts from that job, a template
    with ?template=<id>."""
    initial = {}
    templates = job_selectors.job_templates(user=request.user)
    if request.method == "GET" and ascii_digits(request.GET.get("from", "")):
        initial = form_initial_from_job(_job_or_404(request, int(request.GET["from"])))
    elif request.method == "GET" and ascii_digits(request.GET.get("template", "")):
        template = templates.filter(pk=int(request.GET["template"])).first()
        if template is None:
            raise Http404("No such template.")
        initial = form_initial_from_template(template)
    form = JobForm(request.POST or None, initial=initial, user=request.user)
    if not form.teams:
        raise PermissionDenied("You are not a member of any team, so you cannot submit jobs.")
    if request.method == "POST" and form.is_valid():
        grid = form.cleaned_data.get("sweep")
        try:
            if grid:  # one job per combination of the grid's values
                sweep = sweeps.sweep_submit(
                    user=request.user, team=form.team, name=form.cleaned_data["name"],
                    spec=form.submission(), grid=grid,
                )  # fmt: skip
            else:
                job = job_services.job_submit(
                    user=request.user, team=form.team, **form.submission()
                )
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            if grid:
                messages.success(request, f"Sweep “{sweep.name}”: {sweep.jobs.count()} jobs.")
                return redirect("job-sweep", pk=sweep.pk)
            messages.success(request, f"Job “{job.name}” submitted.")
            return redirect("job-detail", pk=job.pk)
    return render(
        request,
        "queues/jobs/form.html",
        {
            "form": form,
            "summary": job_selectors.team_pool_summary(team=form.team),
            "hold": team_hold_text(team=form.team) if form.team else "",
            "templates": templates,
        },
    )


@login_required
def job_log_view(request, pk):
    """htmx: the last lines of a pod's log (the job page polls it while "follow" is on)."""
    job = _job_or_404(request, pk)
    tail = request.GET.get("tail", "200")
    context = {"job": job, "pod": request.GET.get("pod", ""), "lines": [], "error": ""}
    try:
        text = job_logs.job_log(
            user=request.user, job=job, pod=context["pod"],
            tail=int(tail) if ascii_digits(tail) else 200,
        )  # fmt: skip
        context["lines"] = text.splitlines()
    except ValidationError as exc:
        context["error"] = " ".join(exc.messages)
    return render(request, "queues/jobs/_log.html", context)


@login_required
def job_sweep(request, pk):
    """A sweep's jobs side by side: states, runtimes and costs; cancel them together."""
    sweep = job_selectors.sweep_list(user=request.user).filter(pk=pk).first()
    if sweep is None:
        raise Http404("No such sweep.")
    if not env_readable(env_readers(user=request.user), sweep.team_id):
        sweep.grid = env_hidden(sweep.grid, mask=["hidden"])  # as the jobs hide env values
    rows = job_selectors.sweep_jobs(sweep=sweep)
    can_cancel = any(
        r["job"].state not in Job.FINAL_STATES for r in rows
    ) and sweeps.sweep_can_cancel(user=request.user, sweep=sweep)
    return render(
        request, "queues/jobs/sweep.html", {"sweep": sweep, "rows": rows, "can_cancel": can_cancel}
    )


@login_required
@require_POST
def job_sweep_cancel(request, pk):
    sweep = job_selectors.sweep_list(user=request.user).filter(pk=pk).first()
    if sweep is None:
        raise Http404("No such sweep.")
    cancelled = sweeps.sweep_cancel(user=request.user, sweep=sweep)
    messages.success(request, f"Cancelled {cancelled} job{'s' if cancelled != 1 else ''}.")
    return redirect("job-sweep", pk=pk)


@login_required
@require_POST
def job_save_template(request, pk):
    """'Save as template' on a job's page: its spec, under a name, for its team."""
    job = _job_or_404(request, pk)
    try:
        template = job_template_from_job(
            actor=request.user, job=job, name=request.POST.get("name", "")
        )
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        messages.success(request, f"Saved as template “{template.name}” of {job.team.name}.")
    return redirect("job-detail", pk=pk)


@login_required
@require_POST
def job_template_remove(request, pk):
    template = job_selectors.job_templates(user=request.user).filter(pk=pk).first()
    if template is None:
        raise Http404("No such template.")
    job_template_delete(actor=request.user, template=template)
    messages.success(request, f"Template “{template.name}” deleted.")
    return redirect("job-list")


@login_required
@require_POST
def job_preview(request):
    """htmx: the exact objects the form would create, as YAML; creates nothing."""
    form = JobForm(request.POST, user=request.user)
    context = {"form": form, "summary": [], "yaml": "", "hold": ""}
    if form.team is not None:
        context["summary"] = job_selectors.team_pool_summary(team=form.team)
        context["hold"] = team_hold_text(team=form.team)
    if form.is_valid():
        try:
            values = job_validate(team=form.team, **form.submission())
            # What the submission would refuse as never able to start, said now.
            problem = job_selectors.job_capacity_problem(
                team=form.team, pool=values["pool"], workers=values["workers"],
                gpus_per_worker=values["gpus_per_worker"],
            )  # fmt: skip
            if problem:
                raise ValidationError({problem[0]: problem[1]})
            policy = job_services.approval_policy_get()
            if refused := job_services.registry_problem(image=values["image"], policy=policy):
                raise ValidationError({"image": refused})
            if grid := form.cleaned_data.get("sweep"):
                try:
                    context["sweep_jobs"] = sweeps.sweep_size(grid=grid)
                except ValidationError as exc:
                    raise ValidationError({"sweep": exc.message_dict["grid"]}) from exc
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            # The objects of the cluster the submission would pick, "any pool" included.
            gpus = values["workers"] * values["gpus_per_worker"]
            cluster_id = job_selectors.job_cluster_id(
                team=form.team, pool=values["pool"], gpus=gpus
            )
            backend = backend_of(cluster_id=cluster_id)
            if values["pool"] is None:
                values["pool"] = backend.pool_for_any_pool(
                    team=form.team, cluster_id=cluster_id, gpus=gpus
                )
            job = Job(id=0, team=form.team, **values)
            job.k8s_name = job_manifests.job_k8s_name(name=job.name, job_id=0)
            pull_secrets = team_pull_secret_names(team_id=form.team.pk, cluster_id=cluster_id)
            objects = backend.job_objects(job, pull_secrets=pull_secrets)
            context["yaml"] = yaml.safe_dump_all(objects, sort_keys=False)
            context["pool"] = values["pool"]
    return render(request, "queues/jobs/_preview.html", context)


def _detail_context(request, job):
    held = job.state == Job.State.PENDING_APPROVAL
    approvers = job_approvers(job=job) if held else None
    return {
        "job": job,
        "can_cancel": job.state not in Job.FINAL_STATES
        and lifecycle.job_can_cancel(user=request.user, job=job),
        "can_approve": held and approvers.includes(request.user),
        "approvers": approvers.describe() if held else "",
        "live": job.state not in Job.FINAL_STATES,
        "submitted_wait": job_selectors.job_submitted_wait(job=job)
        or job_selectors.job_cancel_wait(job=job),
        "can_read_logs": job_logs.job_log_readable(user=request.user, job=job),
        "timeline": job_events.job_timeline(job=job),
        "domains": job_selectors.job_domains(job=job),
        "idle": job_selectors.job_idle_status(job=job),
        "can_resume": job.state not in Job.FINAL_STATES
        and idle.job_can_resume(user=request.user, job=job),
        "interruptions": sum(1 for p in job.pods.all() if p.interrupted)
        if job.interruptible
        else 0,
        "protection": job_protection_shown(job=job, now=timezone.now()),
    }


@login_required
def job_detail(request, pk):
    job = _job_or_404(request, pk, detail=True)
    context = _detail_context(request, job)
    # Resubmitting and saving a template are for the team's members (others would get a 403).
    context["is_member"] = team_role(user=request.user, team=job.team) is not None
    return render(request, "queues/jobs/detail.html", context)


@login_required
def job_status(request, pk):
    """htmx: the live part of the job page, polled every 2 s while the job is not final."""
    job = _job_or_404(request, pk, detail=True)
    return render(request, "queues/jobs/_status.html", _detail_context(request, job))


def _workflow(request, pk, action, done):
    job = _job_or_404(request, pk)
    try:
        action(job)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        messages.success(request, done)
    return redirect("job-detail", pk=pk)


@login_required
@require_POST
def job_cancel(request, pk):
    return _workflow(
        request, pk, lambda job: lifecycle.job_cancel(job=job, user=request.user), "Cancelled."
    )


@login_required
@require_POST
def job_resume(request, pk):
    job = _job_or_404(request, pk)
    try:
        idle.job_idle_resume(job=job, user=request.user)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    except kube.KubeError as exc:
        messages.error(request, f"The cluster did not take the resume ({exc}); try again.")
    else:
        messages.success(request, "Resumed: the job is queued again and runs when admitted.")
    return redirect("job-detail", pk=pk)


@login_required
@require_POST
def job_approve(request, pk):
    return _workflow(
        request,
        pk,
        lambda job: job_services.job_approve(job=job, approver=request.user),
        "Approved: the job goes to the cluster.",
    )


@login_required
@require_POST
def job_reject(request, pk):
    reason = request.POST.get("reason", "")[:2000]
    return _workflow(
        request,
        pk,
        lambda job: job_services.job_reject(job=job, approver=request.user, reason=reason),
        "Rejected.",
    )


@login_required
def approval_policy(request):
    """Platform admins edit when jobs wait for their team lead."""
    if not is_platform_admin(request.user):
        raise PermissionDenied("Only platform admins edit the approval policy.")
    policy = job_services.approval_policy_get()
    form = ApprovalPolicyForm(
        request.POST or None,
        initial={
            "tiers_needing_approval": list(policy.tiers_needing_approval.all()),
            "max_gpus_without_approval": policy.max_gpus_without_approval,
            "max_runtime_seconds_without_approval": policy.max_runtime_seconds_without_approval,
            "allowed_registries": "\n".join(policy.allowed_registries),
        },
    )
    if request.method == "POST" and form.is_valid():
        try:
            job_services.approval_policy_update(
                actor=request.user,
                tiers=form.cleaned_data["tiers_needing_approval"],
                max_gpus_without_approval=form.cleaned_data["max_gpus_without_approval"],
                max_runtime_seconds_without_approval=form.cleaned_data[
                    "max_runtime_seconds_without_approval"
                ],
                allowed_registries=form.cleaned_data["allowed_registries"],
            )
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            messages.success(request, "Approval policy saved.")
            return redirect("job-approval-policy")
    return render(request, "queues/jobs/approval_policy.html", {"form": form})
