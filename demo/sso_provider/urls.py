"""The demo provider's pages: its sign-in form (listing its people) and the OpenID Connect
endpoints."""

from django.contrib.auth import views as auth_views
from django.urls import include, path

from demo.sso_provider.people import PEOPLE

PEOPLE_SHOWN = [(name, ", ".join(groups), role) for name, (_, _, groups, role) in PEOPLE.items()]

urlpatterns = [
    path(
        "accounts/login/",
        auth_views.LoginView.as_view(extra_context={"people": PEOPLE_SHOWN}),
        name="login",
    ),  # fmt: skip
    path("openid/", include("oidc_provider.urls", namespace="oidc_provider")),
]
