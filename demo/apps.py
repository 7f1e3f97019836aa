"""Django app configuration of demo: the demo data and its seed_demo command."""

from django.apps import AppConfig


class DemoConfig(AppConfig):
    name = "demo"
    verbose_name = "Demo data"
