"""REST API for advance reservations: leads request, department managers decide, the team
sees them; platform admins set the lead time."""

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.views import APIView

from queues.api.serializers.reservations import (
    ReservationApproveSerializer,
    ReservationCreateSerializer,
    ReservationDetailSerializer,
    ReservationRejectSerializer,
    ReservationSerializer,
    ReservationSettingsSerializer,
)
from queues.models import ReservationSettings
from queues.selectors import reservations as selectors
from queues.services import reservations as services


class ReservationViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):  # fmt: skip
    """Reservations of the teams the caller sees; leads request, managers decide."""

    serializer_class = ReservationSerializer
    filterset_fields = ["state", "team__slug", "pool"]
    ordering_fields = ["starts_at", "created_at"]

    def get_queryset(self):
        return selectors.reservation_list(user=self.request.user)

    def get_serializer_class(self):
        return ReservationDetailSerializer if self.action != "list" else ReservationSerializer

    @extend_schema(
        request=ReservationCreateSerializer, responses={201: ReservationDetailSerializer}
    )
    def create(self, request):
        serializer = ReservationCreateSerializer(data=request.data, context={"request": request})
        serializer.is_valid(raise_exception=True)
        reservation = services.reservation_request(actor=request.user, **serializer.validated_data)
        return Response(
            ReservationDetailSerializer(reservation).data, status=status.HTTP_201_CREATED
        )

    @extend_schema(request=ReservationApproveSerializer, responses=ReservationDetailSerializer)
    @action(detail=True, methods=["post"])
    def approve(self, request, pk=None):
        """Approve (a manager of the department; never the requester): it must still fit."""
        reservation = self.get_object()  # 404 before anything is read of the body
        serializer = ReservationApproveSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        reservation = services.reservation_approve(
            reservation=reservation, approver=request.user, **serializer.validated_data
        )
        return Response(ReservationDetailSerializer(reservation).data)

    @extend_schema(request=ReservationRejectSerializer, responses=ReservationDetailSerializer)
    @action(detail=True, methods=["post"])
    def reject(self, request, pk=None):
        """Reject with a reason the team can read."""
        reservation = self.get_object()  # 404 before anything is read of the body
        serializer = ReservationRejectSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        reservation = services.reservation_reject(
            reservation=reservation,
            approver=request.user,
            reason=serializer.validated_data["reason"],
        )
        return Response(ReservationDetailSerializer(reservation).data)

    @extend_schema(request=None, responses=ReservationDetailSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        """Withdraw it, or end an open window now (who asked, a lead of the team, an admin)."""
        reservation = services.reservation_cancel(reservation=self.get_object(), actor=request.user)
        return Response(ReservationDetailSerializer(reservation).data)


class ReservationSettingsView(APIView):
    """The lead time: every signed-in user reads it, platform admins change it (audited)."""

    @extend_schema(responses=ReservationSettingsSerializer)
    def get(self, request):
        return Response(ReservationSettingsSerializer(ReservationSettings.current()).data)

    @extend_schema(request=ReservationSettingsSerializer, responses=ReservationSettingsSerializer)
    def put(self, request):
        serializer = ReservationSettingsSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        current = services.reservation_settings_update(
            actor=request.user, lead_minutes=serializer.validated_data["lead_minutes"]
        )
        return Response(ReservationSettingsSerializer(current).data)
