"""Reads, one module per concern (clusters, inventory, prices)."""
