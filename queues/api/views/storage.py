"""REST API for team volumes and secrets under /api/v1/: members read, leads change."""

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.response import Response

from queues.api.serializers.storage import (
    SecretSerializer,
    SecretSetSerializer,
    VolumeCreateSerializer,
    VolumeResizeSerializer,
    VolumeSerializer,
)
from queues.models import TeamSecret, TeamVolume
from queues.selectors import storage as selectors
from queues.services import storage as services


class VolumeViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):  # fmt: skip
    """Volumes (PersistentVolumeClaims) of your teams; their leads create, grow and delete
    them, and jobs mount them by name. Deleting a volume deletes its data."""

    serializer_class = VolumeSerializer
    filterset_fields = ["name"]

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return TeamVolume.objects.none()
        return selectors.volume_list(user=self.request.user)

    def _data(self, volumes, *, many=False):
        volumes_list = list(volumes) if many else [volumes]
        context = {**self.get_serializer_context(),
                   "volume_states": selectors.volume_states(volumes=volumes_list)}  # fmt: skip
        return VolumeSerializer(volumes, many=many, context=context).data

    def list(self, request):
        queryset = self.filter_queryset(self.get_queryset())
        page = self.paginate_queryset(queryset)
        return self.get_paginated_response(self._data(page, many=True))

    def retrieve(self, request, pk=None):
        return Response(self._data(self.get_object()))

    @extend_schema(request=VolumeCreateSerializer, responses={201: VolumeSerializer})
    def create(self, request):
        body = VolumeCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        team = selectors.storage_team_for(user=request.user, slug=data["team"])
        volume = services.volume_create(
            actor=request.user, team=team,
            cluster=selectors.storage_cluster_for(team=team, name=data["cluster"]),
            name=data["name"], size_gib=data["size_gib"], storage_class=data["storage_class"],
            access_mode=data["access_mode"],
        )  # fmt: skip
        return Response(self._data(volume), status.HTTP_201_CREATED)

    @extend_schema(request=VolumeResizeSerializer, responses={200: VolumeSerializer})
    def partial_update(self, request, pk=None):
        volume = self.get_object()
        body = VolumeResizeSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        volume = services.volume_resize(
            actor=request.user, volume=volume, size_gib=body.validated_data["size_gib"]
        )
        return Response(self._data(volume))

    def perform_destroy(self, instance):
        services.volume_delete(actor=self.request.user, volume=instance)


class SecretViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):  # fmt: skip
    """Secrets of your teams: names, keys and fingerprints, never values. Their leads set them
    (POST again with the same name replaces the values) and delete them; the values are
    written straight to the team's namespace in the cluster and kept nowhere else. Jobs read
    them as environment variables (`secret_env`); registry secrets are used to pull every job's
    image on that cluster."""

    serializer_class = SecretSerializer
    filterset_fields = ["name", "kind"]

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return TeamSecret.objects.none()
        return selectors.secret_list(user=self.request.user)

    def retrieve(self, request, pk=None):
        secret = self.get_object()
        states = services.secret_states(secrets=[secret])
        return Response(SecretSerializer(secret, context={"secret_states": states}).data)

    @extend_schema(request=SecretSetSerializer, responses={200: SecretSerializer,
                                                           201: SecretSerializer})  # fmt: skip
    def create(self, request):
        body = SecretSetSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = dict(body.validated_data)
        team = selectors.storage_team_for(user=request.user, slug=data.pop("team"))
        cluster = selectors.storage_cluster_for(team=team, name=data.pop("cluster"))
        existed = TeamSecret.objects.filter(team=team, cluster=cluster, name=data["name"]).exists()
        secret = services.secret_set(actor=request.user, team=team, cluster=cluster, **data)
        code = status.HTTP_200_OK if existed else status.HTTP_201_CREATED
        return Response(SecretSerializer(secret).data, code)

    def perform_destroy(self, instance):
        services.secret_delete(actor=self.request.user, secret=instance)
