"""API routes of fleet under /api/v1/: clusters, pools, nodes and GPU models."""

from rest_framework.routers import SimpleRouter

from fleet.api.views import clusters, inventory

router = SimpleRouter()
router.register("clusters", clusters.ClusterViewSet, basename="cluster")
router.register("pools", inventory.PoolViewSet, basename="pool")
router.register("nodes", inventory.NodeViewSet, basename="node")
router.register("gpu-models", inventory.GpuModelViewSet, basename="gpumodel")

urlpatterns = router.urls
