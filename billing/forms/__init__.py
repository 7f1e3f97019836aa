"""Billing web forms, one module per concern."""
