"""List filters of fleet (API): pools and nodes."""

import django_filters

from fleet.models import Node, NodePool


class PoolFilter(django_filters.FilterSet):
    cluster = django_filters.CharFilter(field_name="cluster__name")
    gpu_model = django_filters.CharFilter(field_name="gpu_model__name")

    class Meta:
        model = NodePool
        fields = ["name", "cluster", "gpu_model", "capacity_type", "interconnect"]


class NodeFilter(django_filters.FilterSet):
    cluster = django_filters.CharFilter(field_name="cluster__name")
    pool = django_filters.CharFilter(field_name="pool__name")
    unpooled = django_filters.BooleanFilter(field_name="pool", lookup_expr="isnull")

    class Meta:
        model = Node
        fields = ["cluster", "pool", "unpooled", "unschedulable", "ready"]
