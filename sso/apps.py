"""Django app configuration of sso: single sign-on, above the apps whose roles it grants."""

from django.apps import AppConfig


class SsoConfig(AppConfig):
    name = "sso"
    verbose_name = "Single sign-on"
