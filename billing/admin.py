"""Admin views of billing data (usage rows are read-only: ingestion owns them)."""

from django.contrib import admin

from billing.models import Budget, IngestState, MonthlyReport, ScrapeState, UsageHour
from core.forms import SurrogateFreeModelForm


@admin.register(UsageHour)
class UsageHourAdmin(admin.ModelAdmin):
    list_display = (
        "hour", "gpu_uuid", "pod", "team", "seconds_allocated", "seconds_idle", "seconds_busy",
        "flag_gap", "flag_stuck_zero", "flag_unknown_model",
    )  # fmt: skip
    list_filter = ("flag_gap", "flag_stuck_zero", "flag_unknown_model", "source")
    list_select_related = ("team",)
    search_fields = ("gpu_uuid", "pod", "namespace", "node")
    date_hierarchy = "hour"

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(Budget)
class BudgetAdmin(admin.ModelAdmin):
    form = SurrogateFreeModelForm
    list_display = ("team", "month", "kind", "amount", "enforce", "held", "last_spent")
    list_select_related = ("team",)
    readonly_fields = ("alerts_sent", "held", "last_spent", "last_checked_at")


@admin.register(MonthlyReport)
class MonthlyReportAdmin(admin.ModelAdmin):
    list_display = ("month", "state", "price_book_version", "closed_by", "closed_at")
    readonly_fields = ("snapshot", "price_book_version", "closed_by", "closed_at",
                       "reopened_by", "reopened_at")  # fmt: skip


admin.site.register(ScrapeState)
admin.site.register(IngestState)
