"""API of the what-if simulator: runs (a proposal and its replay's figures) and applying one."""

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response

from core.roles import is_manager, is_platform_admin
from planning.models import WhatIfRun
from planning.services import whatif


def _a_list(value):
    if not isinstance(value, list) or len(value) > 1000:
        raise serializers.ValidationError("Give a list (of at most 1,000 entries).")


class WhatIfInputSerializer(serializers.Serializer):
    """The proposal; its entries are checked one by one by the service, whose errors name the
    entry and field ("quotas[0].nominal_gpus")."""

    name = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    days = serializers.IntegerField(min_value=1, max_value=whatif.MAX_DAYS, default=30)
    quotas = serializers.JSONField(
        required=False, default=list, validators=[_a_list],
        help_text='[{"team": slug, "pool": pool id, "nominal_gpus": n, "borrowing_limit": n '
        'or null, "lending_limit": n or null}]',
    )  # fmt: skip
    pool_sizes = serializers.JSONField(
        required=False, default=list, validators=[_a_list],
        help_text='[{"pool": pool id, "gpus": n}]',
    )  # fmt: skip
    tiers = serializers.JSONField(
        required=False, default=list, validators=[_a_list],
        help_text='[{"tier": name, "value": priority}]',
    )  # fmt: skip
    weights = serializers.JSONField(
        required=False, default=list, validators=[_a_list],
        help_text='[{"team": slug, "weight": "2"}]: fair-sharing weights (0 to 100)',
    )  # fmt: skip
    member_fair_sharing = serializers.JSONField(
        required=False, default=list, validators=[_a_list],
        help_text='[{"team": slug, "enabled": true}]: teams that share their queue fairly among '
        "their members (Kueue's admission fair sharing), or stop",
    )  # fmt: skip
    departments = serializers.JSONField(
        required=False, default=list, validators=[_a_list],
        help_text='[{"department": slug, "shares_with_organisation": true, "weight": "2"}] '
        "(platform admins): departments that share idle GPUs with the organisation or stop, "
        "and their fair-sharing weight there (either may be left out)",
    )  # fmt: skip
    fair_sharing = serializers.BooleanField(
        required=False, allow_null=True, default=None,
        help_text="replay the proposal with Kueue's fair sharing on or off; null: as each "
        "cluster runs it",
    )  # fmt: skip


class WhatIfRunSerializer(serializers.ModelSerializer):
    created_by = serializers.CharField(source="created_by.username", read_only=True)
    result = serializers.JSONField(read_only=True, allow_null=True)
    seconds = serializers.FloatField(read_only=True, allow_null=True)
    applied_at = serializers.DateTimeField(read_only=True, allow_null=True)
    finished_at = serializers.DateTimeField(read_only=True, allow_null=True)

    class Meta:
        model = WhatIfRun
        fields = [
            "id", "name", "created_by", "days", "proposal", "state", "error", "result",
            "seconds", "applied_at", "applied_requests", "created_at", "finished_at",
        ]  # fmt: skip
        read_only_fields = fields


class WhatIfViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin,
    viewsets.GenericViewSet,
):  # fmt: skip
    """What-if runs (managers and platform admins): POST a proposal (quota changes per team and
    pool, pool sizes, tier priorities, fair-sharing weights, member fair sharing, departments
    sharing with the organisation; only what changes) to replay the last `days` of jobs under
    today's configuration and under it; GET the figures side by side once `state` is done; POST
    .../apply/ to file the quota requests it implies and set the weights, member fair sharing
    and the departments' sharing."""

    serializer_class = WhatIfRunSerializer

    def get_queryset(self):
        # Others see no runs at all (a run they name answers 404, as any object not theirs).
        return whatif.whatif_runs(user=self.request.user)

    @extend_schema(request=WhatIfInputSerializer, responses={201: WhatIfRunSerializer})
    def create(self, request, *args, **kwargs):
        if not (is_manager(request.user) or is_platform_admin(request.user)):
            raise PermissionDenied("What-if runs are for department managers and platform admins.")
        data = WhatIfInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        run = whatif.whatif_create(actor=request.user, **data.validated_data)
        run.refresh_from_db()
        return Response(WhatIfRunSerializer(run).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses=WhatIfRunSerializer)
    @action(detail=True, methods=["post"])
    def apply(self, request, pk=None):
        run = self.get_object()
        whatif.whatif_apply(actor=request.user, run=run)
        run.refresh_from_db()
        return Response(WhatIfRunSerializer(run).data)
