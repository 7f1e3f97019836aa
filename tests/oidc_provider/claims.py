"""The claims the test provider gives: profile and e-mail as tests/oidc_provider/users.py says
for each user (preferred_username, email_verified), and `groups` (the user's Django groups) for
the `groups` scope, as identity providers send group claims."""

from django.utils.translation import gettext_lazy as _
from oidc_provider.lib.claims import ScopeClaims

from tests.oidc_provider.users import USERS, claims_of


def userinfo(claims, user):
    if user.username in USERS:
        claims.update(claims_of(user.username))
    else:  # a user the test renamed at the provider: still the same person (the same sub)
        claims.update(preferred_username=user.username, email=user.email, email_verified=True,
                      given_name=user.first_name, family_name=user.last_name)  # fmt: skip
    return claims


class GroupsScopeClaims(ScopeClaims):
    info_groups = (_("Groups"), _("The groups you belong to."))

    def scope_groups(self):
        return {"groups": sorted(self.user.groups.values_list("name", flat=True))}
