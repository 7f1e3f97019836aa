"""Writes, one module per concern (clusters, pools, inventory)."""
