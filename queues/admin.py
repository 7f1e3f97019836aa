from django.contrib import admin

from queues.models import ApiToken, Department, Membership, Team
from queues.roles import is_platform_admin

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
