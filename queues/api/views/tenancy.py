"""REST API for people and tenancy under /api/v1/."""

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.response import Response
from rest_framework.throttling import AnonRateThrottle
from rest_framework.views import APIView

from core.auth import authenticate_counted
from core.permissions import IsPlatformAdminOrReadOnly
from queues.api.serializers.tenancy import (
    ApiTokenCreatedSerializer,
    ApiTokenCreateSerializer,
    ApiTokenSerializer,
    DepartmentFairShareSerializer,
    DepartmentSerializer,
    DepartmentSharingSerializer,
    MembershipSerializer,
    MeSerializer,
    TeamFairShareSerializer,
    TeamHoldSerializer,
    TeamMemberFairShareSerializer,
    TeamMemberFairSharingSerializer,
    TeamPodSecuritySerializer,
    TeamSerializer,
    TokenObtainSerializer,
)
from queues.filters import MembershipFilter, TeamFilter
from queues.models import Membership
from queues.selectors import tenancy as selectors
from queues.selectors.fair_share import department_sharing, team_member_fair_share
from queues.services import tenancy as services
from queues.services.fair_share import (
    department_fair_share_set,
    team_fair_share_set,
    team_member_fair_sharing_set,
)
from queues.services.holds import team_hold, team_release
from queues.services.pod_security import team_pod_security, team_pod_security_set
from queues.services.tenancy import team_delete


def _created_token(token, raw):
    data = ApiTokenCreatedSerializer(token).data
    data["token"] = raw
    return data


class DepartmentViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    viewsets.GenericViewSet,
):
    """Departments the caller may see; platform admins create and edit them."""

    serializer_class = DepartmentSerializer
    permission_classes = [IsPlatformAdminOrReadOnly]
    admin_writes = "departments"
    lookup_field = "slug"
    filterset_fields = ["slug"]
    ordering_fields = ["name", "slug"]

    def get_queryset(self):
        return selectors.department_list(user=self.request.user)

    def perform_create(self, serializer):
        data = serializer.validated_data
        serializer.instance = services.department_create(
            actor=self.request.user,
            slug=data["slug"],
            name=data["name"],
            managers=data.get("managers", ()),
        )

    def perform_update(self, serializer):
        serializer.instance = services.department_update(
            actor=self.request.user, department=serializer.instance, **serializer.validated_data
        )

    def get_permissions(self):
        if self.action == "fair_share":  # the service says who may change it (admins)
            return [IsAuthenticated()]
        return super().get_permissions()

    @extend_schema(
        methods=["GET"],
        request=None,
        responses=DepartmentSharingSerializer,
        description="How the department shares idle GPUs with the organisation (anyone who "
        "sees the department).",
    )
    @extend_schema(
        methods=["POST"], request=DepartmentFairShareSerializer,
        responses=DepartmentSharingSerializer,
        description="Share the department's idle GPUs with the organisation or stop, and set "
        "its fair-sharing weight among the departments that share (platform admins).",
    )  # fmt: skip
    @action(detail=True, methods=["get", "post"], url_path="fair-share")
    def fair_share(self, request, slug=None):
        """Sharing idle GPUs across the organisation: Kueue's Cohort tree and Cohort weights."""
        department = self.get_object()
        if request.method == "POST":
            data = DepartmentFairShareSerializer(data=request.data)
            data.is_valid(raise_exception=True)
            department = department_fair_share_set(
                actor=request.user, department=department,
                shares_with_organisation=data.validated_data.get("shares_with_organisation"),
                weight=data.validated_data.get("weight"),
            )  # fmt: skip
        card = department_sharing(departments=[department])[0]
        return Response(DepartmentSharingSerializer(card).data)


class TeamViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    """Teams the caller may see; platform admins create, edit and remove them."""

    serializer_class = TeamSerializer
    permission_classes = [IsPlatformAdminOrReadOnly]
    admin_writes = "teams"
    lookup_field = "slug"
    filterset_class = TeamFilter
    ordering_fields = ["name", "slug"]

    def get_queryset(self):
        return selectors.team_list(user=self.request.user)

    def perform_create(self, serializer):
        data = serializer.validated_data
        serializer.instance = services.team_create(
            actor=self.request.user,
            slug=data["slug"],
            name=data["name"],
            department=data["department"],
            namespace=data.get("namespace", ""),
            cost_centre=data.get("cost_centre", ""),
        )

    def perform_update(self, serializer):
        serializer.instance = services.team_update(
            actor=self.request.user, team=serializer.instance, **serializer.validated_data
        )

    def perform_destroy(self, instance):
        team_delete(actor=self.request.user, team=instance)

    def get_permissions(self):
        # The services say who may (managers too).
        if self.action in ("hold", "release", "fair_share", "member_fair_sharing"):
            return [IsAuthenticated()]
        return super().get_permissions()

    @extend_schema(request=TeamHoldSerializer, responses=TeamSerializer)
    @action(detail=True, methods=["post"])
    def hold(self, request, slug=None):
        """Hold the team's queues: no new job starts until released (admins, managers)."""
        team = self.get_object()  # 404 before anything is said about the body
        data = TeamHoldSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        team = team_hold(actor=request.user, team=team, reason=data.validated_data["reason"])
        return Response(TeamSerializer(team).data)

    @extend_schema(request=None, responses=TeamSerializer)
    @action(detail=True, methods=["post"])
    def release(self, request, slug=None):
        """Release the team's held queues (admins, managers of its department)."""
        team = team_release(actor=request.user, team=self.get_object())
        return Response(TeamSerializer(team).data)

    @extend_schema(
        methods=["GET"],
        request=None,
        responses=TeamPodSecuritySerializer,
        description="Whether the team is exempt from the Pod Security defaults (anyone who sees "
        "the team).",
    )
    @extend_schema(
        methods=["POST"], request=TeamPodSecuritySerializer, responses=TeamPodSecuritySerializer,
        description="Exempt the team (with a reason, audited) or end its exemption (platform "
        "admins).",
    )  # fmt: skip
    @action(detail=True, methods=["get", "post"], url_path="pod-security")
    def pod_security(self, request, slug=None):
        """The team's Pod Security: baseline enforced, or exempt (platform admins decide)."""
        team = self.get_object()
        if request.method == "POST":
            data = TeamPodSecuritySerializer(data=request.data)
            data.is_valid(raise_exception=True)
            team = team_pod_security_set(actor=request.user, team=team, **data.validated_data)
        return Response(TeamPodSecuritySerializer(team_pod_security(team=team)).data)

    @extend_schema(request=TeamFairShareSerializer, responses=TeamSerializer)
    @action(detail=True, methods=["post"], url_path="fair-share")
    def fair_share(self, request, slug=None):
        """Set the team's fair-sharing weight in its cohort (admins, managers)."""
        team = self.get_object()
        data = TeamFairShareSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        team = team_fair_share_set(
            actor=request.user, team=team, weight=data.validated_data["weight"]
        )
        return Response(TeamSerializer(team).data)

    @extend_schema(
        methods=["GET"],
        request=None,
        responses=TeamMemberFairShareSerializer,
        description="How the team shares its queue among its members (anyone who sees the team).",
    )
    @extend_schema(
        methods=["POST"], request=TeamMemberFairSharingSerializer,
        responses=TeamMemberFairShareSerializer,
        description="Share the team's queue fairly among its members or stop, and set members' "
        "weights (platform admins, managers of its department).",
    )  # fmt: skip
    @action(detail=True, methods=["get", "post"], url_path="member-fair-sharing")
    def member_fair_sharing(self, request, slug=None):
        """Kueue's admission fair sharing among the team's members."""
        team = self.get_object()
        if request.method == "POST":
            data = TeamMemberFairSharingSerializer(data=request.data)
            data.is_valid(raise_exception=True)
            team = team_member_fair_sharing_set(
                actor=request.user, team=team, enabled=data.validated_data.get("enabled"),
                weights=data.validated_data.get("weights"),
            )  # fmt: skip
        return Response(TeamMemberFairShareSerializer(team_member_fair_share(team=team)).data)


class MembershipViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    """Memberships of visible teams; team leads and admins add and remove members."""

    serializer_class = MembershipSerializer
    filterset_class = MembershipFilter
    ordering_fields = ["created_at"]

    def get_queryset(self):
        return selectors.membership_list(user=self.request.user)

    def perform_create(self, serializer):
        data = serializer.validated_data
        # Django's PermissionDenied from the service becomes a 403 in DRF's handler.
        serializer.instance = services.membership_set(
            actor=self.request.user,
            team=data["team"],
            username=data["user"]["username"],
            role=data.get("role", Membership.Role.MEMBER),
        )

    def perform_destroy(self, instance):
        services.membership_delete(actor=self.request.user, membership=instance)


class MeView(APIView):
    """Who the caller is: teams and roles."""

    @extend_schema(responses=MeSerializer)
    def get(self, request):
        roles = selectors.user_roles(user=request.user)
        payload = {
            "id": request.user.pk,
            "username": request.user.username,
            "email": request.user.email,
            "memberships": roles["memberships"],
            "managed_departments": [d.slug for d in roles["managed_departments"]],
            "is_manager": roles["is_manager"],
            "is_finance": roles["is_finance"],
            "is_platform_admin": roles["is_platform_admin"],
        }
        return Response(MeSerializer(payload).data)


class TokenObtainView(APIView):
    """Exchange a username and password for a new API token (for scripts)."""

    authentication_classes = []
    permission_classes = [AllowAny]
    throttle_classes = [AnonRateThrottle]
    throttle_scope = "anon"

    @extend_schema(request=TokenObtainSerializer, responses={201: ApiTokenCreatedSerializer})
    def post(self, request):
        serializer = TokenObtainSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        # Counted like the login page's: a locked-out client is refused even with the right
        # password (the lockout middleware answers 429 with when to try again).
        user = authenticate_counted(
            request,
            username=serializer.validated_data["username"],
            password=serializer.validated_data["password"],
        )
        if user is None:
            raise ValidationError({"non_field_errors": ["Wrong username or password."]})
        token, raw = services.api_token_create(user=user, name=serializer.validated_data["name"])
        return Response(_created_token(token, raw), status=status.HTTP_201_CREATED)


class ApiTokenViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    """The caller's own API tokens: list, create, revoke."""

    serializer_class = ApiTokenSerializer
    permission_classes = [IsAuthenticated]
    filterset_fields = []

    def get_queryset(self):
        return selectors.api_token_list(user=self.request.user)

    @extend_schema(request=ApiTokenCreateSerializer, responses={201: ApiTokenCreatedSerializer})
    def create(self, request):
        serializer = ApiTokenCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        token, raw = services.api_token_create(
            user=request.user, name=serializer.validated_data["name"]
        )
        return Response(_created_token(token, raw), status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses=ApiTokenSerializer)
    @action(detail=True, methods=["post"])
    def revoke(self, request, pk=None):
        token = self.get_object()
        token = services.api_token_revoke(user=request.user, token_id=token.pk)
        return Response(ApiTokenSerializer(token).data)
