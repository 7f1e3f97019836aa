"""Django app configuration of core: what every app shares, below all of them."""

from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "core"
    verbose_name = "Portal"
