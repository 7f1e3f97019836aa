"""Filters for job lists (pages and API): state, pool, owner, team."""

import django_filters

from queues.models import Job


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
