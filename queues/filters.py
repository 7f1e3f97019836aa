"""API filters for people and tenancy."""

import django_filters

from queues.models import Membership, Team


class TeamFilter(django_filters.FilterSet):
    department = django_filters.CharFilter(field_name="department__slug")
    mine = django_filters.BooleanFilter(method="filter_mine", label="Only teams I belong to")

    class Meta:
        model = Team
        fields = ["department", "slug", "mine"]

    def filter_mine(self, queryset, name, value):
        if value:
            return queryset.filter(memberships__user=self.request.user)
        return queryset


class MembershipFilter(django_filters.FilterSet):
    team = django_filters.CharFilter(field_name="team__slug")
    user = django_filters.CharFilter(field_name="user__username")

    class Meta:
        model = Membership
        fields = ["team", "user", "role"]
