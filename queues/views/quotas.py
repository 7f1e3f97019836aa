"""Web pages for quota governance: my quota, filing requests, decisions, audit log, tiers."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.db.models import F
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from core.forms import add_service_errors
from core.pagination import keyset_page
from core.roles import is_manager, is_platform_admin
from core.text import ascii_digits
from fleet.models import NodePool
from queues.filters import AuditEventFilter
from queues.forms.quotas import DecisionForm, QuotaRequestForm, TierForm
from queues.models import PriorityTier, QuotaRequest, Team
from queues.selectors import quotas as selectors
from queues.selectors.approvers import quota_request_approvers
from queues.selectors.audit import audit_event_list
from queues.selectors.reconcile import managed_object_list
from queues.selectors.reservations import reservations_awaiting_decision
from queues.selectors.tenancy import team_list
from queues.services import quotas as services
from queues.services.reconcile import reconcile_all_enqueue
from queues.services.tiers import tier_save


def _my_teams(user):
    if is_platform_admin(user):
        return team_list(user=user)
    return team_list(user=user).filter(memberships__user=user)


@login_required
def quota_overview(request):
    """My teams' quota and use per pool, their requests, and (for managers) what waits."""
    teams = list(_my_teams(request.user))
    by_team = selectors.quota_usage_by_team(teams=teams)
    usage = [(team, by_team[team.pk]) for team in teams]
    requests = selectors.quota_request_list(user=request.user).filter(team__in=teams)[:50]
    pending = selectors.decision_queue(user=request.user).count()
    reservations = reservations_awaiting_decision(user=request.user).count()
    return render(
        request,
        "queues/quota/overview.html",
        {"usage": usage, "requests": requests, "pending_decisions": pending,
         "reservations_waiting": reservations},
    )  # fmt: skip


@login_required
def quota_request_new(request):
    """File a quota request for one of my teams; shows quota, use, capacity and price."""
    teams = _my_teams(request.user)
    if not teams.exists():
        raise PermissionDenied("You belong to no team, so there is no quota to ask for.")
    initial = {"team": teams.filter(slug=request.GET.get("team")).first() or teams.first()}
    if ascii_digits(request.GET.get("pool", "")):
        initial["pool"] = request.GET["pool"]
    form = QuotaRequestForm(request.POST or None, teams=teams, initial=initial)
    if request.method == "POST" and form.is_valid():
        try:
            created = services.quota_request_create(actor=request.user, **form.submission())
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            if getattr(created, "capacity_warning", ""):
                messages.warning(request, created.capacity_warning)
            if created.state == QuotaRequest.State.PENDING:
                messages.success(request, "Request filed; your department's managers decide.")
            else:
                messages.success(request, "A decrease: approved automatically.")
            return redirect("quota-request-detail", pk=created.pk)
    chosen = form["team"].value()
    if isinstance(chosen, Team):
        team = chosen
    else:
        team = teams.filter(pk=chosen).first() if ascii_digits(str(chosen)) else None
    team = team or initial["team"]
    return render(
        request,
        "queues/quota/request_form.html",
        {"form": form, "team": team, "pools": selectors.pool_rows_for_team(team=team)},
    )


@login_required
def quota_request_figures(request):
    """htmx partial: the chosen pool's figures and the monthly price of the GPUs asked for."""
    team_id = request.GET.get("team", "")
    team = _my_teams(request.user).filter(pk=team_id).first() if ascii_digits(team_id) else None
    pool_id = request.GET.get("pool", "")
    pool = (
        NodePool.objects.select_related("gpu_model").filter(pk=pool_id).first()
        if ascii_digits(pool_id)
        else None
    )
    nominal = request.GET.get("nominal_gpus", "")
    nominal = int(nominal) if ascii_digits(nominal) else None
    figures = None
    if team is not None and pool is not None:
        figures = selectors.quota_request_figures(
            request_or_team=team, pool=pool, nominal_gpus=nominal
        )
    return render(
        request,
        "queues/quota/_figures.html",
        {"figures": figures, "team": team, "pool": pool, "nominal": nominal},
    )


@login_required
def quota_request_detail(request, pk):
    """A request: state, numbers, decision; managers of the department decide here."""
    try:
        quota_request = selectors.quota_request_get(user=request.user, pk=pk)
    except QuotaRequest.DoesNotExist as exc:
        raise Http404("No such quota request.") from exc
    approvers = quota_request_approvers(quota_request=quota_request)
    pending = quota_request.state == QuotaRequest.State.PENDING
    can_decide = pending and approvers.includes(request.user)
    form = DecisionForm(
        request.POST or None,
        quota_request=quota_request,
        initial={
            "nominal_gpus": quota_request.nominal_gpus,
            "borrowing_limit": quota_request.borrowing_limit,
            "lending_limit": quota_request.lending_limit,
        },
    )
    if request.method == "POST":
        if not can_decide:
            raise PermissionDenied(approvers.refusal(request.user))
        if form.is_valid():
            data = form.cleaned_data
            try:
                if "reject" in request.POST:
                    services.quota_request_reject(
                        quota_request=quota_request, approver=request.user, reason=data["reason"]
                    )
                    messages.success(request, "Request rejected; the team has been told.")
                else:
                    services.quota_request_approve(
                        quota_request=quota_request,
                        approver=request.user,
                        reason=data["reason"],
                        **form.decision(),
                    )
                    messages.success(request, "Approved; the cluster is being updated.")
            except ValidationError as exc:
                add_service_errors(form, exc)
            else:
                return redirect("quota-request-detail", pk=quota_request.pk)
    figures = selectors.quota_request_figures(
        request_or_team=quota_request,
        pool=quota_request.pool,
        nominal_gpus=quota_request.granted_nominal_gpus or quota_request.nominal_gpus,
    )
    return render(
        request,
        "queues/quota/request_detail.html",
        {
            "qr": quota_request,
            "can_decide": can_decide,
            "approvers": approvers.describe() if pending else "",
            "can_cancel": pending
            and services.quota_request_can_cancel(user=request.user, quota_request=quota_request),
            "form": form,
            "figures": figures,
            "apply_wait": selectors.quota_request_apply_wait(quota_request=quota_request),
        },
    )


@login_required
def decision_queue(request):
    """Pending requests I may decide: my departments' (not my own), and, for platform admins,
    those nobody else can decide."""
    if not (is_manager(request.user) or is_platform_admin(request.user)):
        raise PermissionDenied("Department managers and platform admins decide quota requests.")
    pending = list(selectors.decision_queue(user=request.user))
    return render(request, "queues/quota/decisions.html", {"pending": pending})


@login_required
def audit_log(request):
    """Audit events: managers see their departments', platform admins all."""
    if not (is_manager(request.user) or is_platform_admin(request.user)):
        raise PermissionDenied("The audit log is for managers and platform admins.")
    events = AuditEventFilter(request.GET, queryset=audit_event_list(user=request.user))
    page = keyset_page(events.qs, before=request.GET.get("before"), size=50)
    return render(request, "queues/quota/audit.html", {"page": page, "filter": events})


@login_required
def tier_list(request):
    """Priority tiers; platform admins add and edit them."""
    tiers = PriorityTier.objects.order_by("-value")
    return render(
        request,
        "queues/quota/tiers.html",
        {"tiers": tiers, "can_edit": is_platform_admin(request.user)},
    )


@login_required
def tier_edit(request, pk=None):
    if not is_platform_admin(request.user):
        raise PermissionDenied("Only platform admins change priority tiers.")
    tier = None
    if pk is not None:
        tier = PriorityTier.objects.filter(pk=pk).first()
        if tier is None:
            raise Http404("No such tier.")
    initial = TierForm.initial_for(tier) if tier else {"preemptible": True}
    form = TierForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        try:
            tier_save(actor=request.user, tier=tier, **form.cleaned_data)
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            messages.success(request, "Tier saved; clusters are being updated.")
            return redirect("quota-tiers")
    return render(request, "queues/quota/tier_form.html", {"form": form, "tier": tier})


@login_required
def managed_objects(request):
    """What the portal manages in each cluster: applied or lagging, and the last error."""
    if not is_platform_admin(request.user):
        raise PermissionDenied("Only platform admins see the managed cluster objects.")
    objects = managed_object_list(user=request.user)
    if request.GET.get("problems"):
        objects = objects.filter(applied_generation__lt=F("desired_generation"))
    page = Paginator(objects, 100).get_page(request.GET.get("page"))
    return render(request, "queues/quota/objects.html", {"page": page})


@login_required
@require_POST
def managed_objects_reconcile(request):
    if not is_platform_admin(request.user):
        raise PermissionDenied("Only platform admins can start a reconcile.")
    reconcile_all_enqueue()
    messages.success(request, "Reconcile queued for every cluster; reload in a moment.")
    return redirect("quota-objects")


@login_required
@require_POST
def quota_request_cancel(request, pk):
    try:
        quota_request = selectors.quota_request_get(user=request.user, pk=pk)
    except QuotaRequest.DoesNotExist as exc:
        raise Http404("No such quota request.") from exc
    try:
        services.quota_request_cancel(quota_request=quota_request, actor=request.user)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        messages.success(request, "Request withdrawn.")
    return redirect("quota-request-detail", pk=pk)
