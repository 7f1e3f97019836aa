from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db import transaction

from core.forms import SurrogateFreeModelForm
from core.roles import is_platform_admin
from fleet.models import Cluster, GpuModel, Node, NodePool
from fleet.services.clusters import cluster_delete, cluster_sync_enqueue


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    form = SurrogateFreeModelForm
    list_display = [
        "name",
        "scheduler",
        "kueue_api_version",
        "in_cluster",
        "kubeconfig_path",
        "is_default",
        "last_sync_at",
    ]
    readonly_fields = [
        "last_sync_at", "last_sync_error", "created_at", "last_contact_at", "api_latency_ms",
        "unreachable_since", "retry_at", "last_error", "last_error_at", "deleted_at",
    ]  # fmt: skip
    search_fields = ["name"]
    actions = ["sync_now"]

    # Deleting goes through the portal's service (refused with active jobs, removes the objects
    # kept in the cluster, keeps the row only while history refers to it), so platform admins
    # may delete here too; the history that refers to a cluster is not listed as blocking it.
    def has_delete_permission(self, request, obj=None):
        return is_platform_admin(request.user)

    def get_deleted_objects(self, objs, request):
        return [str(obj) for obj in objs], {"clusters": len(objs)}, set(), []

    def delete_model(self, request, obj):
        try:
            cluster_delete(actor=request.user, cluster=obj)
        except ValidationError as exc:
            messages.error(request, " ".join(exc.messages))

    def delete_queryset(self, request, queryset):
        for obj in queryset:
            self.delete_model(request, obj)

    def get_queryset(self, request):
        return super().get_queryset(request).filter(deleted_at__isnull=True)

    @admin.action(description="Sync inventory now")
    def sync_now(self, request, queryset):
        for cluster in queryset:
            transaction.on_commit(lambda pk=cluster.pk: cluster_sync_enqueue(cluster_id=pk))
        messages.success(request, f"Inventory sync queued for {queryset.count()} cluster(s).")


@admin.register(GpuModel)
class GpuModelAdmin(admin.ModelAdmin):
    form = SurrogateFreeModelForm
    list_display = ["name", "vendor", "memory_mib", "product_labels", "dcgm_model_names"]
    search_fields = ["name"]


@admin.register(NodePool)
class NodePoolAdmin(admin.ModelAdmin):
    form = SurrogateFreeModelForm
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
