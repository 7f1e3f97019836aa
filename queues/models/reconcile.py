"""The Kubernetes objects the portal owns in each cluster, desired and applied."""

from django.db import models

from fleet.models import Cluster


class ManagedObject(models.Model):
    """One Kubernetes object the portal owns: its desired manifest and what was applied."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="managed_objects")
    api_version = models.CharField(max_length=100)
    kind = models.CharField(max_length=100)
    namespace = models.CharField(max_length=63, blank=True)
    name = models.CharField(max_length=253)
    # What produced it, e.g. ("team", 3); used to find and prune objects per owner.
    owner_type = models.CharField(max_length=32)
    owner_id = models.BigIntegerField()
    desired = models.JSONField(default=dict)
    desired_hash = models.CharField(max_length=64, blank=True)
    desired_generation = models.PositiveIntegerField(default=1)
    applied_generation = models.PositiveIntegerField(default=0)
    applied_hash = models.CharField(max_length=64, blank=True)
    # The manifest last accepted by the cluster, for the diff of the next apply.
    applied_manifest = models.JSONField(null=True, blank=True)
    applied_at = models.DateTimeField(null=True, blank=True)
    # The live object's status as last read (ClusterQueue flavor usage), for pages.
    live_status = models.JSONField(null=True, blank=True)
    observed_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)
    # The desired generation the cluster refused permanently (422, 403 ...): not retried in a
    # loop, only after a while or when the desired manifest changes.
    failed_generation = models.PositiveIntegerField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    delete_requested = models.BooleanField(default=False)

    class Meta:
        ordering = ["cluster__name", "kind", "namespace", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "kind", "namespace", "name"], name="managedobject_unique"
            ),
        ]
        indexes = [models.Index(fields=["owner_type", "owner_id"], name="managedobject_owner")]

    def __str__(self):
        return f"{self.kind} {self.namespace + '/' if self.namespace else ''}{self.name}"
