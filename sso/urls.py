"""Routes of single sign-on: the one sign-out, and the provider's redirects under /oidc/."""

from django.urls import include, path

from sso import oidc

urlpatterns = [
    # One sign-out for everyone: it also ends the identity provider's session after single
    # sign-on.
    path("accounts/logout/", oidc.SignOutView.as_view(), name="logout"),
    path("oidc/", include(oidc.urlpatterns)),
]
