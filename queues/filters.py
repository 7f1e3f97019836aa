"""List filters (pages and API): teams, memberships, jobs and the audit log."""

import django_filters

from queues.models import AuditEvent, Job, Membership, Team


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


class AuditEventFilter(django_filters.FilterSet):
    """The audit log's filters: who, which team, what kind of thing, and when."""

    actor = django_filters.CharFilter(
        method="filter_actor", label="Who", help_text="A username; “system” for the portal itself."
    )
    team = django_filters.CharFilter(field_name="team__slug", label="Team (slug)")
    kind = django_filters.ChoiceFilter(
        method="filter_kind", label="Kind", empty_label="Any kind", choices=()
    )
    since = django_filters.DateFilter(field_name="created_at", lookup_expr="date__gte",
                                      label="From (date)")  # fmt: skip
    until = django_filters.DateFilter(field_name="created_at", lookup_expr="date__lte",
                                      label="To (date)")  # fmt: skip

    class Meta:
        model = AuditEvent
        fields = ["actor", "team", "kind", "since", "until"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        kinds = sorted({verb.split(".", 1)[0] for verb in AuditEvent.objects.values_list(
            "verb", flat=True).distinct()})  # fmt: skip
        self.filters["kind"].extra["choices"] = [(k, k.replace("_", " ")) for k in kinds]

    def filter_actor(self, queryset, name, value):
        if value.strip().lower() in ("system", "quartermaster"):
            return queryset.filter(actor__isnull=True)
        return queryset.filter(actor__username=value.strip())

    def filter_kind(self, queryset, name, value):
        return queryset.filter(verb__startswith=f"{value}.")
