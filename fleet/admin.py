from django.contrib import admin, messages
from django.db import transaction

from fleet.models import Cluster, GpuModel, Node, NodePool, WorkerHeartbeat
from fleet.services.clusters import cluster_sync_enqueue


@admin.register(WorkerHeartbeat)
class WorkerHeartbeatAdmin(admin.ModelAdmin):
    list_display = ["hostname", "seen_at"]


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "scheduler",
        "kueue_api_version",
        "in_cluster",
        "kubeconfig_path",
        "is_default",
        "last_sync_at",
    ]
    readonly_fields = ["last_sync_at", "last_sync_error", "created_at"]
    search_fields = ["name"]
    actions = ["sync_now"]

    @admin.action(description="Sync inventory now")
    def sync_now(self, request, queryset):
        for cluster in queryset:
            transaction.on_commit(lambda pk=cluster.pk: cluster_sync_enqueue(cluster_id=pk))
        messages.success(request, f"Inventory sync queued for {queryset.count()} cluster(s).")


@admin.register(GpuModel)
class GpuModelAdmin(admin.ModelAdmin):
    list_display = ["name", "vendor", "memory_mib", "product_labels", "dcgm_model_names"]
    search_fields = ["name"]


@admin.register(NodePool)
class NodePoolAdmin(admin.ModelAdmin):
    list_display = ["name", "cluster", "gpu_model", "capacity_type", "interconnect", "sharing"]
    list_filter = ["cluster", "capacity_type", "interconnect", "sharing"]
    list_select_related = ["cluster", "gpu_model"]
    search_fields = ["name"]


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "cluster",
        "pool",
        "gpu_model",
        "gpu_capacity",
        "gpu_allocated",
        "unschedulable",
        "ready",
        "last_seen_at",
    ]
    list_filter = ["cluster", "pool", "unschedulable", "ready"]
    list_select_related = ["cluster", "pool", "gpu_model"]
    search_fields = ["name"]
    readonly_fields = [f.name for f in Node._meta.fields]
