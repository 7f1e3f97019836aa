"""Billing's management commands."""
