"""What the demo provider says about a person: name and e-mail (verified), and, for the
`groups` scope, their groups, which the portal's OIDC_ROLE_MAP turns into roles."""

from django.utils.translation import gettext_lazy as _
from oidc_provider.lib.claims import ScopeClaims


def userinfo(claims, user):
    claims.update(
        preferred_username=user.username,
        given_name=user.first_name,
        family_name=user.last_name,
        name=user.get_full_name(),
        email=user.email,
        email_verified=True,
    )
    return claims


class GroupsScopeClaims(ScopeClaims):
    info_groups = (_("Groups"), _("The groups you belong to in the demo directory."))

    def scope_groups(self):
        return {"groups": sorted(self.user.groups.values_list("name", flat=True))}
