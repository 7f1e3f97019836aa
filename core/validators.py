"""Validators every app's models and forms share."""

from django.core.validators import URLValidator

# Every URL the portal calls (Prometheus, exporters, webhooks): http or https, nothing else.
http_url = URLValidator(schemes=["http", "https"], message="Enter an http:// or https:// URL.")
