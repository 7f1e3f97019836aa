"""{{ n|count:"GPU" }} gives "1 GPU" or "12 GPUs" (core.text.count)."""

from django import template

from core.text import count as count_text

register = template.Library()


@register.filter
def count(number, word: str) -> str:
    return count_text(number, word)
