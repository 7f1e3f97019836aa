"""The team's volumes and secrets page: members see them, leads change them."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from core.errors import ClusterRefused
from core.forms import add_service_errors
from core.roles import is_platform_admin
from queues.forms.storage import SecretForm, VolumeForm, VolumeResizeForm
from queues.models import Team
from queues.selectors import storage as selectors
from queues.selectors.tenancy import team_get, team_role, user_is_team_lead
from queues.services import storage as services


def _team(request, slug) -> Team:
    """The team, for its members and platform admins (404 for everyone else)."""
    try:
        team = team_get(user=request.user, slug=slug)
    except Team.DoesNotExist as exc:
        raise Http404("No such team.") from exc
    if team_role(user=request.user, team=team) is None and not is_platform_admin(request.user):
        raise Http404("No such team.")
    return team


def _page(request, team, *, volume_form=None, secret_form=None, status=200):
    volumes = list(selectors.volume_list(user=request.user).filter(team=team))
    secrets = list(selectors.secret_list(user=request.user).filter(team=team))
    states = selectors.volume_states(volumes=volumes)
    secret_states = services.secret_states(secrets=secrets)
    for volume in volumes:
        volume.state = states.get(volume.pk, "")
    for secret in secrets:
        secret.state = secret_states.get(secret.pk, "unknown")
    can_change = is_platform_admin(request.user) or user_is_team_lead(user=request.user, team=team)
    context = {
        "team": team, "volumes": volumes, "secrets": secrets, "can_change": can_change,
        "volume_form": volume_form or VolumeForm(prefix="volume"),
        "secret_form": secret_form or SecretForm(prefix="secret"),
    }  # fmt: skip
    return render(request, "queues/storage.html", context, status=status)


@login_required
def team_storage(request, slug):
    return _page(request, _team(request, slug))


@login_required
@require_POST
def volume_new(request, slug):
    team = _team(request, slug)
    form = VolumeForm(request.POST, prefix="volume")
    if form.is_valid():
        data = form.cleaned_data
        try:
            volume = services.volume_create(actor=request.user, team=team, **data)
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            messages.success(request, f"Volume {volume.name} is being created in the cluster.")
            return redirect("team-storage", slug=team.slug)
    return _page(request, team, volume_form=form, status=400)


def _volume(request, team, pk):
    volume = selectors.volume_list(user=request.user).filter(team=team, pk=pk).first()
    if volume is None:
        raise Http404("No such volume.")
    return volume


@login_required
@require_POST
def volume_resize(request, slug, pk):
    team = _team(request, slug)
    volume = _volume(request, team, pk)
    form = VolumeResizeForm(request.POST)
    try:
        if not form.is_valid():
            raise ValidationError(form.errors["size_gib"][0])
        services.volume_resize(actor=request.user, volume=volume,
                               size_gib=form.cleaned_data["size_gib"])  # fmt: skip
        messages.success(request, f"Volume {volume.name} grows to {volume.size_gib} GiB.")
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    return redirect("team-storage", slug=team.slug)


@login_required
@require_POST
def volume_remove(request, slug, pk):
    team = _team(request, slug)
    volume = _volume(request, team, pk)
    try:
        services.volume_delete(actor=request.user, volume=volume)
        messages.success(request, f"Volume {volume.name} and its data are being deleted.")
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    return redirect("team-storage", slug=team.slug)


@login_required
@require_POST
def secret_set(request, slug):
    team = _team(request, slug)
    form = SecretForm(request.POST, prefix="secret")
    if form.is_valid():
        data = form.cleaned_data
        try:
            secret = services.secret_set(actor=request.user, team=team, **data)
        except ValidationError as exc:
            add_service_errors(form, exc)
        except ClusterRefused as exc:
            form.add_error(None, str(exc))
            return _page(request, team, secret_form=form, status=503)
        else:
            messages.success(request, f"Secret {secret.name} is stored in the cluster.")
            return redirect("team-storage", slug=team.slug)
    return _page(request, team, secret_form=form, status=400)


@login_required
@require_POST
def secret_remove(request, slug, pk):
    team = _team(request, slug)
    secret = selectors.secret_list(user=request.user).filter(team=team, pk=pk).first()
    if secret is None:
        raise Http404("No such secret.")
    try:
        removed = services.secret_delete(actor=request.user, secret=secret)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        messages.success(request, f"Secret {secret.name} is deleted" + (
            " from the cluster." if removed else
            f"; cluster {secret.cluster.name} does not answer now, and it is removed there "
            "as soon as it does."))  # fmt: skip
    return redirect("team-storage", slug=team.slug)
