"""Validators for names that end up in Kubernetes objects."""

import re

from anyascii import anyascii
from django.core.validators import RegexValidator

# The bounded repetition encodes the 63-character limit, so the database check enforces it too.
DNS1123_LABEL_RE = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
DNS1123_LABEL_MESSAGE = (
    "Use 1 to 63 lower-case letters, digits and '-', starting and ending with a letter or digit "
    "(a DNS-1123 label, e.g. 'vision' or 'nlp-research')."
)

dns1123_label = RegexValidator(
    regex=DNS1123_LABEL_RE, message=DNS1123_LABEL_MESSAGE, code="invalid_dns1123"
)


def to_dns1123_label(text: str, *, max_length: int = 63) -> str:
    """Derive a valid DNS-1123 label from free text ('My Job_1' -> 'my-job-1'). Other scripts
    are transliterated first ('名前🚀' -> 'mingqian-rocket', 'Обучение' -> 'obuchenie'), so the
    name stays readable in kubectl."""
    label = re.sub(r"[^a-z0-9-]+", "-", anyascii(text).lower())
    label = re.sub(r"-{2,}", "-", label).strip("-")
    return label[:max_length].strip("-") or "x"


# A container environment variable name as the portal accepts it (a C identifier, which every
# shell and framework reads).
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
