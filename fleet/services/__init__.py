"""Writes for fleet: cluster registration, node pools, and inventory sync from the cluster."""

from fleet.services.clusters import (
    CLUSTER_FIELDS,
    cluster_delete,
    cluster_register,
    cluster_sync_enqueue,
    cluster_sync_request,
    cluster_update,
)
from fleet.services.inventory import SyncResult, cluster_sync_inventory
from fleet.services.pools import (
    POOL_FIELDS,
    TAINT_EFFECTS,
    pool_create,
    pool_saved,
    pool_update,
    tolerations_for,
)

__all__ = [
    "CLUSTER_FIELDS",
    "POOL_FIELDS",
    "TAINT_EFFECTS",
    "SyncResult",
    "cluster_delete",
    "cluster_register",
    "cluster_sync_enqueue",
    "cluster_sync_inventory",
    "cluster_sync_request",
    "cluster_update",
    "pool_create",
    "pool_saved",
    "pool_update",
    "tolerations_for",
]
