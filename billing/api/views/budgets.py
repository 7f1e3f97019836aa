"""API views of budgets: those of the teams the caller sees; finance and admins set them."""

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.response import Response

from billing.api.lookups import visible_team
from billing.api.serializers.budgets import BudgetInputSerializer, BudgetSerializer
from billing.models import Budget
from billing.permissions import FinanceWritesOthersRead
from billing.selectors.budgets import budget_list
from billing.services.budgets import budget_set


class BudgetViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    """Budgets of the teams the caller sees; finance and admins set them (POST upserts)."""

    serializer_class = BudgetSerializer
    permission_classes = [FinanceWritesOthersRead]

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return Budget.objects.none()
        return budget_list(user=self.request.user)

    @extend_schema(request=BudgetInputSerializer, responses=BudgetSerializer)
    def create(self, request):
        data_in = BudgetInputSerializer(data=request.data)
        data_in.is_valid(raise_exception=True)
        data = dict(data_in.validated_data)
        team = visible_team(user=request.user, slug=data.pop("team"), field=True)
        budget = budget_set(actor=request.user, team=team, **data)
        return Response(BudgetSerializer(budget).data, status=status.HTTP_201_CREATED)
