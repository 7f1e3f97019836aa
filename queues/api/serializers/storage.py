"""API serializers for team volumes and secrets (a secret's values are write-only)."""

from rest_framework import serializers

from queues.models import TeamSecret, TeamVolume


class VolumeSerializer(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    cluster = serializers.CharField(source="cluster.name", read_only=True)
    created_by = serializers.CharField(
        source="created_by.username", read_only=True, allow_null=True
    )
    status = serializers.SerializerMethodField(
        help_text="The claim in the cluster: Bound, Pending (with why), Creating, or Error."
    )

    class Meta:
        model = TeamVolume
        fields = [
            "id", "team", "cluster", "name", "size_gib", "storage_class", "access_mode",
            "status", "created_by", "created_at",
        ]  # fmt: skip
        read_only_fields = fields

    def get_status(self, volume) -> str:
        return self.context.get("volume_states", {}).get(volume.pk, "")


class VolumeCreateSerializer(serializers.Serializer):
    team = serializers.SlugField(required=False, allow_blank=True, default="")
    cluster = serializers.CharField(
        required=False, allow_blank=True, default="", max_length=63,
        help_text="The cluster's name; empty: the cluster the team's jobs run on.",
    )  # fmt: skip
    name = serializers.CharField(max_length=63, help_text="A DNS-1123 label, e.g. datasets.")
    size_gib = serializers.IntegerField()
    storage_class = serializers.CharField(
        required=False, allow_blank=True, default="", max_length=253,
        help_text="A StorageClass of the cluster; empty: its default class.",
    )  # fmt: skip
    access_mode = serializers.CharField(
        required=False, default=TeamVolume.AccessMode.RWX, max_length=20,
        help_text="ReadWriteMany (default), ReadWriteOnce, ReadOnlyMany or ReadWriteOncePod.",
    )  # fmt: skip


class VolumeResizeSerializer(serializers.Serializer):
    size_gib = serializers.IntegerField(help_text="The new size; volumes only grow.")


class SecretSerializer(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    cluster = serializers.CharField(source="cluster.name", read_only=True)
    fingerprint = serializers.SerializerMethodField(
        help_text="The first characters of a keyed hash of the values: it changes when they do."
    )
    updated_by = serializers.CharField(
        source="updated_by.username", read_only=True, allow_null=True
    )
    in_cluster = serializers.SerializerMethodField(
        help_text="On one secret: ok, missing, changed (outside the portal) or unknown."
    )

    class Meta:
        model = TeamSecret
        fields = [
            "id", "team", "cluster", "name", "kind", "keys", "registry", "fingerprint",
            "in_cluster", "updated_by", "created_at", "updated_at",
        ]  # fmt: skip
        read_only_fields = fields

    def get_fingerprint(self, secret) -> str:
        return secret.fingerprint[:16]

    def get_in_cluster(self, secret) -> str | None:
        return self.context.get("secret_states", {}).get(secret.pk)


class SecretSetSerializer(serializers.Serializer):
    team = serializers.SlugField(required=False, allow_blank=True, default="")
    cluster = serializers.CharField(required=False, allow_blank=True, default="", max_length=63)
    name = serializers.CharField(max_length=63)
    kind = serializers.ChoiceField(choices=TeamSecret.Kind.choices, default="generic")
    values = serializers.JSONField(
        required=False, default=dict, write_only=True,
        help_text='KEY to value for a generic secret, e.g. {"api-key": "…"}; never shown again.',
    )  # fmt: skip
    registry = serializers.CharField(required=False, allow_blank=True, default="", max_length=253)
    username = serializers.CharField(required=False, allow_blank=True, default="", max_length=253)
    password = serializers.CharField(
        required=False, allow_blank=True, default="", write_only=True, max_length=4096
    )
