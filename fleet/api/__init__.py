"""The REST API of fleet under /api/v1/: clusters, pools, nodes and GPU models."""
