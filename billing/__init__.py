"""Billing: GPU usage from DCGM, its rollups and pricing, budgets, month close and reports."""
