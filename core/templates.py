"""The portal's Django template backend: pages render as Django's do, and a lone UTF-16
surrogate in what a page shows (core/text.py) comes out as U+FFFD instead of failing the
response when it is encoded as UTF-8."""

from django.template.backends.django import DjangoTemplates
from django.template.backends.django import Template as DjangoTemplate

from core.text import scrub


class Template(DjangoTemplate):
    def render(self, context=None, request=None):
        return scrub(super().render(context, request))


class PortalTemplates(DjangoTemplates):
    def from_string(self, template_code):
        return Template(super().from_string(template_code).template, self)

    def get_template(self, template_name):
        return Template(super().get_template(template_name).template, self)
