"""Fleet pages under /fleet/."""

from django.urls import path

from fleet import views

urlpatterns = [
    path("", views.overview, name="fleet-overview"),
    path("clusters/new/", views.cluster_form, name="fleet-cluster-create"),
    path("clusters/<int:pk>/edit/", views.cluster_form, name="fleet-cluster-edit"),
    path("clusters/<int:pk>/sync/", views.cluster_sync, name="fleet-cluster-sync"),
    path("pools/new/", views.pool_form, name="fleet-pool-create"),
    path("pools/<int:pk>/", views.pool_nodes, name="fleet-pool-nodes"),
    path("pools/<int:pk>/edit/", views.pool_form, name="fleet-pool-edit"),
]
