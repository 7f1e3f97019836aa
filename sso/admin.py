"""Admin of single sign-on: the identities accounts are bound to (deleting one unbinds it; the
next sign-in with that identity then makes or links an account as a first one does)."""

from django.contrib import admin

from sso.models import Identity


@admin.register(Identity)
class IdentityAdmin(admin.ModelAdmin):
    list_display = ["user", "issuer", "subject", "linked", "email", "last_sign_in_at"]
    list_filter = ["issuer", "linked"]
    search_fields = ["user__username", "subject", "email"]
    readonly_fields = ["user", "issuer", "subject", "linked", "email", "created_at",
                       "last_sign_in_at"]  # fmt: skip

    def has_add_permission(self, request):
        return False
