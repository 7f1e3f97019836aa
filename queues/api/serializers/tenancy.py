"""API serializers for people and tenancy."""

import math
from decimal import Decimal

from django.contrib.auth import get_user_model
from rest_framework import serializers

from fleet.validators import DNS1123_LABEL_MESSAGE, DNS1123_LABEL_RE
from queues.models import ApiToken, Department, Membership, Team
from queues.models.tenancy import FAIR_SHARE_WEIGHT_MAX
from queues.selectors.tenancy import team_list

User = get_user_model()


class DepartmentSerializer(serializers.ModelSerializer):
    slug = serializers.RegexField(
        DNS1123_LABEL_RE, max_length=63, error_messages={"invalid": DNS1123_LABEL_MESSAGE}
    )
    managers = serializers.SlugRelatedField(
        slug_field="username", many=True, queryset=User.objects.all(), required=False
    )

    class Meta:
        model = Department
        fields = [
            "id", "slug", "name", "managers", "shares_with_organisation", "fair_share_weight",
            "created_at",
        ]  # fmt: skip
        # Sharing with the organisation is set through POST …/fair-share/ (audited, admins).
        read_only_fields = ["id", "shares_with_organisation", "fair_share_weight", "created_at"]


class TeamSerializer(serializers.ModelSerializer):
    slug = serializers.RegexField(
        DNS1123_LABEL_RE, max_length=63, error_messages={"invalid": DNS1123_LABEL_MESSAGE}
    )
    namespace = serializers.RegexField(
        DNS1123_LABEL_RE,
        max_length=63,
        required=False,
        error_messages={"invalid": DNS1123_LABEL_MESSAGE},
    )
    department = serializers.SlugRelatedField(slug_field="slug", queryset=Department.objects.all())

    class Meta:
        model = Team
        fields = [
            "id", "slug", "name", "namespace", "cost_centre", "department", "queue_hold_reason",
            "fair_share_weight", "member_fair_sharing", "created_at",
        ]  # fmt: skip
        read_only_fields = [
            "id", "queue_hold_reason", "fair_share_weight", "member_fair_sharing", "created_at",
        ]  # fmt: skip

    def validate(self, attrs):
        # A new team's namespace is its slug unless given; a changed slug keeps the namespace.
        if self.instance is None and not attrs.get("namespace") and "slug" in attrs:
            attrs["namespace"] = attrs["slug"]
        return attrs


class OptionalBooleanField(serializers.BooleanField):
    """A boolean that a form-encoded body may leave out (DRF reads a missing checkbox as
    false): left out, it is not changed."""

    default_empty_html = serializers.empty


class TeamHoldSerializer(serializers.Serializer):
    """Why a team's queues are held (shown to the team)."""

    reason = serializers.CharField(max_length=300)


class TeamPodSecuritySerializer(serializers.Serializer):
    """Whether the team is exempt from the Pod Security defaults, and why (platform admins)."""

    exempt = serializers.BooleanField()
    reason = serializers.CharField(required=False, allow_blank=True, max_length=1000, default="")
    enforced = serializers.CharField(
        read_only=True, help_text="The standard its namespace enforces: baseline, or privileged."
    )


class TeamFairShareSerializer(serializers.Serializer):
    """A team's Kueue fair-sharing weight: 1 is the default, 2 twice the share, 0 last."""

    weight = serializers.DecimalField(
        max_digits=6,
        decimal_places=3,
        min_value=Decimal(0),
        max_value=Decimal(FAIR_SHARE_WEIGHT_MAX),
    )


class TeamMemberFairSharingSerializer(serializers.Serializer):
    """Share the team's queue fairly among its members (Kueue's admission fair sharing), and
    members' weights by username: a member's use counts divided by their weight (default 1)."""

    enabled = OptionalBooleanField(required=False)
    weights = serializers.DictField(
        child=serializers.DecimalField(
            max_digits=6, decimal_places=3, min_value=Decimal(0),
            max_value=Decimal(FAIR_SHARE_WEIGHT_MAX),
        ),
        required=False,
        allow_empty=True,
    )  # fmt: skip

    def validate(self, attrs):
        if "enabled" not in attrs and "weights" not in attrs:
            raise serializers.ValidationError("Give enabled, weights, or both.")
        return attrs


class DepartmentFairShareSerializer(serializers.Serializer):
    """Share the department's idle GPUs with the organisation (its Cohort under the
    organisation's) or stop, and its fair-sharing weight among the departments that share."""

    shares_with_organisation = OptionalBooleanField(required=False)
    weight = serializers.DecimalField(
        max_digits=6, decimal_places=3, min_value=Decimal(0),
        max_value=Decimal(FAIR_SHARE_WEIGHT_MAX), required=False,
    )  # fmt: skip

    def validate(self, attrs):
        if not attrs:
            raise serializers.ValidationError("Give shares_with_organisation, weight, or both.")
        return attrs


class ClusterShareSerializer(serializers.Serializer):
    cluster = serializers.CharField()
    share = serializers.IntegerField(help_text="the weightedShare the cluster's Kueue reports")


class DepartmentPoolSerializer(serializers.Serializer):
    pool = serializers.CharField(source="pool.name")
    cluster = serializers.CharField(source="pool.cluster.name")
    nominal_gpus = serializers.IntegerField(help_text="the department's teams' quota, summed")
    in_use = serializers.IntegerField(help_text="GPUs its teams' jobs hold now")
    beyond_quota = serializers.IntegerField(
        help_text="what of that is beyond the department's quota: borrowed from other "
        "departments through the organisation"
    )


class DepartmentSharingSerializer(serializers.Serializer):
    """How a department shares idle GPUs with the organisation."""

    department = serializers.CharField(source="department.slug")
    shares_with_organisation = serializers.BooleanField()
    weight = serializers.DecimalField(max_digits=6, decimal_places=3)
    shares = ClusterShareSerializer(
        many=True, help_text="the share each cluster reports for the department's Cohort"
    )
    pools = DepartmentPoolSerializer(many=True)


class FiniteFloatField(serializers.FloatField):
    """A float that JSON can hold: infinity and NaN (which JSON has no word for) are null."""

    def to_representation(self, value):
        value = super().to_representation(value)
        return value if math.isfinite(value) else None


class MemberShareSerializer(serializers.Serializer):
    """One member under member fair sharing."""

    username = serializers.CharField()
    queue = serializers.CharField(help_text="the member's own LocalQueue")
    weight = serializers.DecimalField(max_digits=6, decimal_places=3)
    consumed_gpus = serializers.FloatField(
        allow_null=True,
        help_text="GPUs Kueue remembers the member held (a decayed average, over the clusters "
        "that report it); null where none does",
    )
    usage = FiniteFloatField(
        allow_null=True,
        help_text="consumed_gpus / weight: the lower, the sooner Kueue serves them; null where "
        "none reports it, or where the weight is 0 (use without end: served last)",
    )
    decayed_gpu_hours = serializers.FloatField(
        help_text="GPU-hours the member's jobs held, each halved every half-life (the portal's)"
    )
    waiting = serializers.IntegerField(help_text="the member's jobs waiting now")


class TeamMemberFairShareSerializer(serializers.Serializer):
    """How a team shares its queue among its members, members in the order Kueue serves them."""

    enabled = serializers.BooleanField()
    reported = serializers.BooleanField(help_text="whether a cluster reports the members' usage")
    half_life_hours = serializers.FloatField()
    members = MemberShareSerializer(many=True)


class VisibleTeamField(serializers.SlugRelatedField):
    """A team by its slug, among the teams the caller sees: one it may not see reads as one
    that does not exist (the service then says why a member may not act on a team it sees)."""

    def __init__(self, **kwargs):
        super().__init__(slug_field="slug", queryset=Team.objects.none(), **kwargs)

    def get_queryset(self):
        request = self.context.get("request")
        if request is None or not request.user.is_authenticated:
            return Team.objects.none()
        return team_list(user=request.user)


class MembershipSerializer(serializers.ModelSerializer):
    # A username, resolved by the service only once the caller may change the team's members:
    # otherwise its error would tell anyone which usernames exist.
    user = serializers.CharField(source="user.username", max_length=150)
    team = VisibleTeamField()

    class Meta:
        model = Membership
        fields = ["id", "user", "team", "role", "fair_share_weight", "created_at"]
        read_only_fields = ["id", "fair_share_weight", "created_at"]


class MembershipBriefSerializer(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    team_name = serializers.CharField(source="team.name", read_only=True)

    class Meta:
        model = Membership
        fields = ["team", "team_name", "role"]


class MeSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    username = serializers.CharField()
    email = serializers.EmailField()
    memberships = MembershipBriefSerializer(many=True)
    managed_departments = serializers.ListField(child=serializers.CharField())
    is_manager = serializers.BooleanField()
    is_finance = serializers.BooleanField()
    is_platform_admin = serializers.BooleanField()


class TokenObtainSerializer(serializers.Serializer):
    username = serializers.CharField()
    password = serializers.CharField(style={"input_type": "password"}, trim_whitespace=False)
    name = serializers.CharField(max_length=100, required=False, default="script")


class ApiTokenSerializer(serializers.ModelSerializer):
    class Meta:
        model = ApiToken
        fields = [
            "id", "name", "prefix", "created_at", "last_used_at", "expires_at", "revoked_at",
        ]  # fmt: skip
        read_only_fields = fields


class ApiTokenCreatedSerializer(ApiTokenSerializer):
    token = serializers.CharField(read_only=True, help_text="Shown once; store it safely.")

    class Meta(ApiTokenSerializer.Meta):
        fields = [*ApiTokenSerializer.Meta.fields, "token"]
        read_only_fields = fields


class ApiTokenCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100)
