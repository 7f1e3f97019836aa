"""List filters (pages and API): teams, memberships and jobs."""

import django_filters

from queues.models import Job, Membership, Team


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


class JobFilter(django_filters.FilterSet):
    state = django_filters.MultipleChoiceFilter(choices=Job.State.choices)
    pool = django_filters.CharFilter(method="filter_pool", label="Pool")
    user = django_filters.CharFilter(field_name="owner__username", label="User")
    team = django_filters.CharFilter(field_name="team__slug", label="Team")

    class Meta:
        model = Job
        fields = ["state", "pool", "user", "team"]

    def filter_pool(self, queryset, name, value):
        if value == "any":
            return queryset.filter(pool__isnull=True)
        return queryset.filter(pool__name=value)
