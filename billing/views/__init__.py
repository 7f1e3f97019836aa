"""Billing pages under /billing/, one module per concern."""
