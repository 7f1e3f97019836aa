"""Fixtures that run kubesim and register it as a Cluster (owned by the fleet work)."""
