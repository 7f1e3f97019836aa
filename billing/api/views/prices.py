"""API views of the price book: the list with its history; finance and admins add prices."""

from rest_framework import mixins, viewsets

from billing.api.serializers.prices import GpuPriceSerializer
from billing.permissions import FinanceWritesOthersRead
from billing.selectors.prices import price_list
from billing.services.prices import gpu_price_create


class GpuPriceViewSet(mixins.ListModelMixin, mixins.CreateModelMixin, viewsets.GenericViewSet):
    """The price book with its history; finance and admins add prices."""

    serializer_class = GpuPriceSerializer
    permission_classes = [FinanceWritesOthersRead]
    filterset_fields = ["mig_profile", "currency"]

    def get_queryset(self):
        return price_list(user=self.request.user)

    def perform_create(self, serializer):
        serializer.instance = gpu_price_create(actor=self.request.user, **serializer.validated_data)
