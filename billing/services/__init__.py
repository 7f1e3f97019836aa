"""Billing writes, one module per concern: usage, rollups, prices, budgets, months."""
