"""fleet's models, one module per concern; import them from here."""

from fleet.models.clusters import Cluster
from fleet.models.inventory import GpuModel, Node, NodePool
from fleet.models.prices import GpuPrice, PostgresExclusionConstraint, TsTzRange

__all__ = [
    "Cluster",
    "GpuModel",
    "GpuPrice",
    "Node",
    "NodePool",
    "PostgresExclusionConstraint",
    "TsTzRange",
]
