"""Fleet pages under /fleet/."""

from django.urls import path

from fleet.views import clusters, inventory

urlpatterns = [
    path("", inventory.overview, name="fleet-overview"),
    path("clusters/new/", clusters.cluster_form, name="fleet-cluster-create"),
    path("clusters/<int:pk>/edit/", clusters.cluster_form, name="fleet-cluster-edit"),
    path("clusters/<int:pk>/sync/", clusters.cluster_sync, name="fleet-cluster-sync"),
    path("clusters/<int:pk>/disable/", clusters.cluster_disable_view, name="fleet-cluster-disable"),
    path("clusters/<int:pk>/enable/", clusters.cluster_enable_view, name="fleet-cluster-enable"),
    path("clusters/<int:pk>/delete/", clusters.cluster_delete_view, name="fleet-cluster-delete"),
    path("pools/new/", inventory.pool_form, name="fleet-pool-create"),
    path("pools/<int:pk>/", inventory.pool_nodes, name="fleet-pool-nodes"),
    path("pools/<int:pk>/edit/", inventory.pool_form, name="fleet-pool-edit"),
]
