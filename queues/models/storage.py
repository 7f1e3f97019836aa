"""A team's data and credentials in a cluster: volumes (PersistentVolumeClaims the portal
reconciles) and secrets (Kubernetes Secrets whose values the portal never stores)."""

from django.conf import settings
from django.db import models
from django.db.models import Q

from fleet.models import Cluster
from fleet.validators import DNS1123_LABEL_RE, dns1123_label
from queues.models.tenancy import Team


class TeamVolume(models.Model):
    """A PersistentVolumeClaim in the team's namespace on one cluster, which jobs there mount."""

    class AccessMode(models.TextChoices):
        RWO = "ReadWriteOnce", "ReadWriteOnce (one node at a time)"
        RWX = "ReadWriteMany", "ReadWriteMany (many nodes)"
        ROX = "ReadOnlyMany", "ReadOnlyMany (many nodes, read-only)"
        RWOP = "ReadWriteOncePod", "ReadWriteOncePod (one pod)"

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="volumes")
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=63, validators=[dns1123_label])
    size_gib = models.PositiveIntegerField()
    # Empty: the cluster's default StorageClass.
    storage_class = models.CharField(max_length=253, blank=True)
    access_mode = models.CharField(
        max_length=20, choices=AccessMode.choices, default=AccessMode.RWX
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["team", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["team", "cluster", "name"], name="teamvolume_unique_name"
            ),
            models.CheckConstraint(
                condition=Q(name__regex=DNS1123_LABEL_RE), name="teamvolume_name_dns1123"
            ),
            models.CheckConstraint(condition=Q(size_gib__gte=1), name="teamvolume_size_positive"),
        ]

    def __str__(self):
        return f"{self.team.slug}/{self.name}"


class TeamSecret(models.Model):
    """A Secret in the team's namespace on one cluster. The values live only in the cluster:
    the portal keeps the key names and a keyed fingerprint of the values, to tell a changed or
    missing Secret from the one it wrote."""

    class Kind(models.TextChoices):
        GENERIC = "generic", "Values (env vars in jobs)"
        REGISTRY = "registry", "Image pull secret (registry credentials)"

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="secrets")
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=63, validators=[dns1123_label])
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.GENERIC)
    keys = models.JSONField(default=list)
    # For an image pull secret: the registry it signs in to (host[:port]).
    registry = models.CharField(max_length=253, blank=True)
    fingerprint = models.CharField(max_length=64)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["team", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["team", "cluster", "name"], name="teamsecret_unique_name"
            ),
            models.CheckConstraint(
                condition=Q(name__regex=DNS1123_LABEL_RE), name="teamsecret_name_dns1123"
            ),
        ]

    def __str__(self):
        return f"{self.team.slug}/{self.name}"
