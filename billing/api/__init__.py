"""Billing REST API under /api/v1/billing/: usage, reports, month close, prices, budgets."""
