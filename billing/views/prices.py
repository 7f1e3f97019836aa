"""The price book page: prices with their history; finance and admins add a price."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.shortcuts import redirect, render

from billing.forms.prices import GpuPriceForm
from billing.permissions import can_manage_billing
from billing.selectors.prices import price_list
from billing.services.prices import gpu_price_create
from core.forms import add_service_errors


@login_required
def price_list_page(request):
    can_edit = can_manage_billing(request.user)
    form = GpuPriceForm(request.POST or None)
    if request.method == "POST":
        if not can_edit:
            raise PermissionDenied("Only finance and platform admins edit prices.")
        if form.is_valid():
            try:
                gpu_price_create(actor=request.user, **form.cleaned_data)
            except ValidationError as exc:
                add_service_errors(form, exc)
            else:
                messages.success(request, "Price added.")
                return redirect("billing-prices")
    return render(
        request,
        "billing/prices.html",
        {"prices": price_list(user=request.user), "form": form, "can_edit": can_edit},
        status=400 if form.errors else 200,
    )
