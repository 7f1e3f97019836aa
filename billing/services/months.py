"""Month close: freezing a month's report as a snapshot, and reopening it."""

from __future__ import annotations

from datetime import date

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from billing.models import MonthlyReport
from billing.periods import month_start, next_month
from billing.permissions import can_manage_billing
from billing.selectors.reports import finance_report
from core.roles import is_platform_admin
from fleet.selectors.prices import price_book_version
from queues.services.audit import audit


def report_close(*, actor, month: date) -> MonthlyReport:
    """Freeze the month's report: a snapshot priced with the current price-book version."""
    if not can_manage_billing(actor):
        raise PermissionDenied("Only finance and platform admins close a month.")
    month = month_start(month)
    if next_month(month) > timezone.now().date():
        raise ValidationError({"month": "A month can be closed once it has ended."})
    snapshot = finance_report(month=month)
    with transaction.atomic():
        report, _ = MonthlyReport.objects.select_for_update().get_or_create(month=month)
        if report.state == MonthlyReport.State.CLOSED:
            return report
        report.snapshot = snapshot
        report.price_book_version = price_book_version()
        report.state = MonthlyReport.State.CLOSED
        report.closed_by = actor
        report.closed_at = timezone.now()
        report.save()
        audit(
            actor=actor,
            verb="report.close",
            obj=report,
            after={"price_book_version": report.price_book_version},
        )
    return report


def report_reopen(*, actor, month: date, reason: str = "") -> MonthlyReport:
    """Reopen a closed month (admins only); leaves an audit event with the old snapshot's total."""
    if not is_platform_admin(actor):
        raise PermissionDenied("Only a platform admin reopens a closed month.")
    with transaction.atomic():
        report = MonthlyReport.objects.select_for_update().filter(month=month_start(month)).first()
        if report is None or report.state != MonthlyReport.State.CLOSED:
            raise ValidationError({"month": "This month is not closed."})
        before = {
            "price_book_version": report.price_book_version,
            "closed_at": report.closed_at.isoformat() if report.closed_at else None,
            "total_cost": (report.snapshot or {}).get("totals", {}).get("cost"),
        }
        report.state = MonthlyReport.State.OPEN
        report.snapshot = None
        report.closed_at = None
        report.reopened_by = actor
        report.reopened_at = timezone.now()
        report.save()
        audit(actor=actor, verb="report.reopen", obj=report, before=before, message=reason)
    return report
