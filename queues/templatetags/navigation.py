"""The main navigation (templates/partials/_nav.html). It shows everyone the same links but
platform admins, so it is rendered once per process for each URL prefix, page and admin or
not, and reused: its dozen reversed URLs cost a job page more than its own rows."""

from django import template
from django.template.loader import get_template
from django.urls import get_script_prefix

register = template.Library()

# (URL prefix, the page's URL name, platform admin or not) -> the rendered links. Bounded by
# the portal's URL names; those are everything _nav.html reads, so nothing else can differ.
_rendered: dict[tuple, str] = {}


@register.simple_tag(takes_context=True)
def main_nav(context):
    match = getattr(context.get("request"), "resolver_match", None)
    url_name = match.url_name if match else None
    nav = context.get("nav")
    is_platform_admin = bool(nav and nav.is_platform_admin)
    key = (get_script_prefix(), url_name, is_platform_admin)
    html = _rendered.get(key)
    if html is None:
        html = get_template("partials/_nav.html").render(
            {"url_name": url_name, "is_platform_admin": is_platform_admin}
        )
        _rendered[key] = html
    return html
