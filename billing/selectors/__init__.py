"""Billing reads, one module per concern: usage, prices, budgets, reports."""
