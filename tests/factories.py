"""factory-boy factories shared by all tests."""

import factory
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from queues.models import Department, Membership, Team
from queues.roles import GROUP_FINANCE, GROUP_MANAGERS, GROUP_PLATFORM_ADMINS

PASSWORD = "pw-for-tests-1"


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.org")
    password = factory.PostGenerationMethodCall("set_password", PASSWORD)

    @factory.post_generation
    def groups(self, create, extracted, **kwargs):
        if create and extracted:
            self.groups.set([Group.objects.get_or_create(name=name)[0] for name in extracted])
        if create:
            self.save()


class DepartmentFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Department
        django_get_or_create = ("slug",)
        skip_postgeneration_save = True

    slug = factory.Sequence(lambda n: f"dept-{n}")
    name = factory.LazyAttribute(lambda d: d.slug.title())

    @factory.post_generation
    def managers(self, create, extracted, **kwargs):
        if create and extracted:
            self.managers.set(extracted)


class TeamFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Team
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"team-{n}")
    name = factory.LazyAttribute(lambda t: t.slug.title())
    namespace = factory.LazyAttribute(lambda t: f"ns-{t.slug}")
    cost_centre = "CC-0000"
    department = factory.SubFactory(DepartmentFactory)


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    user = factory.SubFactory(UserFactory)
    team = factory.SubFactory(TeamFactory)
    role = Membership.Role.MEMBER


def manager_of(department, username="manager"):
    user = UserFactory(username=username, groups=[GROUP_MANAGERS])
    department.managers.add(user)
    return user


def finance_user(username="finance"):
    return UserFactory(username=username, groups=[GROUP_FINANCE])


def platform_admin(username="platformadmin"):
    return UserFactory(username=username, groups=[GROUP_PLATFORM_ADMINS], is_staff=True)


# --- billing ------------------------------------------------------------------------------------
# One factory per billing model. Cluster is fleet's; rows that need one get a shared default.

from datetime import UTC, date, datetime, timedelta  # noqa: E402
from decimal import Decimal  # noqa: E402

from billing.models import (  # noqa: E402
    Budget,
    IngestState,
    MonthlyReport,
    ScrapeState,
    TeamBillingPolicy,
    UsageDay,
    UsageDayState,
    UsageHour,
)
from fleet.models import Cluster  # noqa: E402

BILLING_HOUR = datetime(2026, 10, 1, tzinfo=UTC)


def billing_cluster() -> Cluster:
    """The cluster billing rows belong to unless a test names one."""
    cluster, _ = Cluster.objects.get_or_create(
        name="billing", defaults={"kubeconfig_path": "/dev/null"}
    )
    return cluster


class UsageHourFactory(factory.django.DjangoModelFactory):
    """A GPU-hour: held by a pod for `seconds` (default), or idle capacity when pod=""."""

    class Meta:
        model = UsageHour

    class Params:
        seconds = 3600

    hour = BILLING_HOUR
    cluster = factory.LazyFunction(billing_cluster)
    gpu_uuid = factory.Sequence(lambda n: f"GPU-{n:04d}")
    pod = factory.Sequence(lambda n: f"pod-{n}")
    team = None
    job = None
    gpu_model = None
    pool = None
    namespace = factory.LazyAttribute(lambda u: u.team.namespace if u.team and u.pod else "")
    model_name = factory.LazyAttribute(lambda u: u.gpu_model.name if u.gpu_model else "NVIDIA X")
    seconds_allocated = factory.LazyAttribute(lambda u: u.seconds if u.pod else 0)
    seconds_idle = factory.LazyAttribute(lambda u: 0 if u.pod else u.seconds)
    seconds_busy = factory.LazyAttribute(lambda u: u.seconds // 2)
    util_mean = 50.0
    sample_count = 120
    expected_samples = 120


class UsageDayFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = UsageDay

    day = BILLING_HOUR.date()
    cluster = factory.LazyFunction(billing_cluster)
    allocated = 3600
    used = 1800


class UsageDayStateFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = UsageDayState

    cluster = factory.LazyFunction(billing_cluster)
    day = factory.Sequence(lambda n: BILLING_HOUR.date() + timedelta(days=n))
    dirty = True


class ScrapeStateFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ScrapeState

    url = factory.Sequence(lambda n: f"http://exporter-{n}:9400/metrics")
    cluster = factory.LazyFunction(billing_cluster)


class IngestStateFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = IngestState

    cluster = factory.LazyFunction(billing_cluster)
    hour = factory.Sequence(lambda n: BILLING_HOUR + timedelta(hours=n))
    state = IngestState.State.DONE


class TeamBillingPolicyFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = TeamBillingPolicy

    team = factory.SubFactory(TeamFactory)
    basis = TeamBillingPolicy.Basis.ALLOCATED


class BudgetFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Budget

    team = factory.SubFactory(TeamFactory)
    month = BILLING_HOUR.date()
    amount = Decimal("100.00")
    thresholds = factory.LazyFunction(lambda: [50, 80, 100])


class MonthlyReportFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = MonthlyReport

    month = factory.Sequence(lambda n: date(2000 + n // 12, n % 12 + 1, 1))
    state = MonthlyReport.State.OPEN
