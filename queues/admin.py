from django.contrib import admin

from core.roles import is_platform_admin
from queues.models import (
    ApiToken,
    AuditEvent,
    Department,
    Job,
    JobPod,
    ManagedObject,
    Membership,
    PriorityTier,
    Quota,
    QuotaRequest,
    Team,
)

# Only platform admins (who must also be staff) reach the Django admin.
admin.site.has_permission = lambda request: (
    request.user.is_active and request.user.is_staff and is_platform_admin(request.user)
)
admin.site.site_header = "Quartermaster administration"
admin.site.site_title = "Quartermaster admin"


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 1
    autocomplete_fields = ["user"]


@admin.register(Department)
class DepartmentAdmin(admin.ModelAdmin):
    list_display = ["slug", "name"]
    search_fields = ["slug", "name"]
    filter_horizontal = ["managers"]


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "namespace", "department", "cost_centre"]
    list_filter = ["department"]
    search_fields = ["slug", "name", "namespace", "cost_centre"]
    list_select_related = ["department"]
    inlines = [MembershipInline]


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "team", "role"]
    list_filter = ["role", "team"]
    list_select_related = ["user", "team"]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["name", "user", "prefix", "created_at", "last_used_at", "revoked_at"]
    readonly_fields = ["prefix", "digest", "created_at", "last_used_at"]
    list_select_related = ["user"]


class ReadOnlyAdmin(admin.ModelAdmin):
    """Changes go through the portal's services (audit, reconcile); the admin only shows them."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(PriorityTier)
class PriorityTierAdmin(ReadOnlyAdmin):
    list_display = ["name", "value", "preemptible", "is_default"]


@admin.register(Quota)
class QuotaAdmin(ReadOnlyAdmin):
    list_display = ["team", "pool", "nominal_gpus", "borrowing_limit", "lending_limit", "ends_at"]
    list_select_related = ["team", "pool"]


@admin.register(QuotaRequest)
class QuotaRequestAdmin(ReadOnlyAdmin):
    list_display = ["team", "pool", "nominal_gpus", "state", "requested_by", "created_at"]
    list_filter = ["state"]
    list_select_related = ["team", "pool", "requested_by"]


@admin.register(Job)
class JobAdmin(ReadOnlyAdmin):
    list_display = ["name", "team", "owner", "state", "workers", "gpus_per_worker", "created_at"]
    list_filter = ["state", "team"]
    list_select_related = ["team", "owner"]
    search_fields = ["name", "k8s_name"]


@admin.register(JobPod)
class JobPodAdmin(ReadOnlyAdmin):
    list_display = ["name", "job", "node_name", "gpus", "started_at", "finished_at"]
    list_select_related = ["job"]


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "actor", "verb", "object_repr"]
    list_select_related = ["actor"]


@admin.register(ManagedObject)
class ManagedObjectAdmin(ReadOnlyAdmin):
    list_display = ["kind", "namespace", "name", "desired_generation", "applied_generation"]
    list_select_related = ["cluster"]
