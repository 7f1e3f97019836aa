"""The energy settings page: platform admins set the PUE and the grid carbon intensity (a
constant, and an hourly series uploaded as CSV)."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.shortcuts import redirect, render

from billing.forms.energy import CarbonSeriesForm, EnergySettingsForm
from billing.models import EnergySettings
from billing.selectors.energy import carbon_series_summary
from billing.services.energy import carbon_series_upload, energy_settings_update
from core.forms import add_service_errors
from core.roles import is_platform_admin


@login_required
def energy_settings_page(request):
    if not is_platform_admin(request.user):
        raise PermissionDenied("Only platform admins set the PUE and the carbon intensity.")
    site = EnergySettings.current()
    initial = {"pue": site.pue, "grams_per_kwh": site.grams_per_kwh}
    settings_form = EnergySettingsForm(initial=initial)
    series_form = CarbonSeriesForm()
    if request.method == "POST":
        if request.POST.get("action") == "series":
            series_form = CarbonSeriesForm(request.POST, request.FILES)
            if series_form.is_valid():
                try:
                    hours = carbon_series_upload(
                        actor=request.user, data=series_form.cleaned_data["file"].read()
                    )
                except ValidationError as exc:
                    add_service_errors(series_form, exc)
                else:
                    messages.success(request, f"Uploaded {hours} hours of carbon intensity.")
                    return redirect("billing-energy")
        else:
            settings_form = EnergySettingsForm(request.POST)
            if settings_form.is_valid():
                try:
                    energy_settings_update(actor=request.user, **settings_form.cleaned_data)
                except ValidationError as exc:
                    add_service_errors(settings_form, exc)
                else:
                    messages.success(request, "Energy settings saved.")
                    return redirect("billing-energy")
    return render(
        request,
        "billing/energy.html",
        {
            "site": site,
            "settings_form": settings_form,
            "series_form": series_form,
            "series": carbon_series_summary(),
        },
        status=400 if settings_form.errors or series_form.errors else 200,
    )
