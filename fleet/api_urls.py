"""REST routes for fleet under /api/v1/."""

from rest_framework.routers import SimpleRouter

from fleet import api

router = SimpleRouter()
router.register("clusters", api.ClusterViewSet, basename="cluster")
router.register("pools", api.PoolViewSet, basename="pool")
router.register("nodes", api.NodeViewSet, basename="node")
router.register("gpu-models", api.GpuModelViewSet, basename="gpumodel")

urlpatterns = router.urls
