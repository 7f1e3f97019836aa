"""Billing API input and output shapes, one module per concern."""
