"""factory-boy factories shared by all tests: one for every model of fleet, queues and billing,
plus helpers for users in a role."""

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import factory
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.utils import timezone

from billing.models import (
    Budget,
    CarbonIntensityHour,
    EnergySettings,
    GpuFault,
    GpuFaultCredit,
    GpuHealth,
    GpuHealthEvent,
    IdleWatchState,
    IngestState,
    LedgerHour,
    LedgerRate,
    LedgerState,
    MonthlyReport,
    ScrapeState,
    TeamBillingPolicy,
    UsageDay,
    UsageDayState,
    UsageHour,
)
from core.models import UnsentTask, WorkerHeartbeat
from core.roles import GROUP_FINANCE, GROUP_MANAGERS, GROUP_PLATFORM_ADMINS
from fleet.models import Cluster, GpuModel, GpuPrice, Node, NodePool
from planning.models import QuotaAutoApproval, WhatIfRun
from queues.models import (
    ApiToken,
    ApprovalPolicy,
    AuditEvent,
    Department,
    Job,
    JobCheckpoint,
    JobEvent,
    JobPod,
    JobPreemption,
    JobTemplate,
    JobTransition,
    LogStream,
    ManagedObject,
    Membership,
    PriorityTier,
    Quota,
    QuotaRequest,
    Reservation,
    ReservationSettings,
    Sweep,
    Team,
    TeamSecret,
    TeamVolume,
)
from sso.models import Identity

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


# --- fleet ------------------------------------------------------------------------------------


class WorkerHeartbeatFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = WorkerHeartbeat

    hostname = factory.Sequence(lambda n: f"worker-{n}")
    seen_at = factory.LazyFunction(timezone.now)


class UnsentTaskFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = UnsentTask

    name = "queues.apply_jobs"
    args = factory.Sequence(lambda n: [n])
    error = "Error 111 connecting to the broker."


class ClusterFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Cluster
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"cluster-{n}")
    kubeconfig_path = "/dev/null"


class GpuModelFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = GpuModel
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"GPU-MODEL-{n}")
    memory_mib = 81920
    product_labels = factory.LazyAttribute(lambda m: [m.name])


class NodePoolFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = NodePool

    cluster = factory.SubFactory(ClusterFactory)
    name = factory.Sequence(lambda n: f"pool-{n}")
    gpu_model = factory.SubFactory(GpuModelFactory)
    node_selector = factory.LazyAttribute(lambda p: {"accelerator": p.name})


class NodeFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Node

    pool = factory.SubFactory(NodePoolFactory)
    cluster = factory.LazyAttribute(lambda n: n.pool.cluster)
    gpu_model = factory.LazyAttribute(lambda n: n.pool.gpu_model)
    name = factory.Sequence(lambda n: f"node-{n}")
    gpu_capacity = 8
    gpu_allocatable = 8


class GpuPriceFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = GpuPrice

    gpu_model = factory.SubFactory(GpuModelFactory)
    price_per_hour = Decimal("2.0000")
    currency = "EUR"
    effective_from = datetime(2020, 1, 1, tzinfo=UTC)


# --- queues -----------------------------------------------------------------------------------


class ApiTokenFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ApiToken

    user = factory.SubFactory(UserFactory)
    name = factory.Sequence(lambda n: f"token-{n}")
    prefix = factory.Sequence(lambda n: f"qm_{n:08d}"[:12])
    digest = factory.Sequence(lambda n: f"{n:064x}")


class PriorityTierFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = PriorityTier
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"tier-{n}")
    value = factory.Sequence(lambda n: 100 + n)


class QuotaFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Quota

    team = factory.SubFactory(TeamFactory)
    pool = factory.SubFactory(NodePoolFactory)
    nominal_gpus = 4


class QuotaRequestFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = QuotaRequest

    team = factory.SubFactory(TeamFactory)
    pool = factory.SubFactory(NodePoolFactory)
    requested_by = factory.SubFactory(UserFactory)
    nominal_gpus = 8
    justification = "More experiments."


class ReservationFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Reservation

    team = factory.SubFactory(TeamFactory)
    pool = factory.SubFactory(NodePoolFactory)
    requested_by = factory.SubFactory(UserFactory)
    gpus = 2
    starts_at = factory.LazyFunction(lambda: timezone.now() + timedelta(days=1))
    ends_at = factory.LazyAttribute(lambda r: r.starts_at + timedelta(hours=6))
    reason = "A deadline."


class ReservationSettingsFactory(factory.django.DjangoModelFactory):
    """The site's one row (pk 1)."""

    class Meta:
        model = ReservationSettings
        django_get_or_create = ("id",)

    id = 1
    lead_minutes = 60


class QuotaAutoApprovalFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = QuotaAutoApproval

    enabled = True
    min_usage_percent = 80


class WhatIfRunFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = WhatIfRun

    name = factory.Sequence(lambda n: f"proposal {n}")
    created_by = factory.SubFactory(UserFactory)
    days = 7
    proposal = factory.LazyFunction(lambda: {"quotas": [], "pool_sizes": [], "tiers": []})


class ManagedObjectFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ManagedObject

    cluster = factory.SubFactory(ClusterFactory)
    api_version = "v1"
    kind = "Namespace"
    name = factory.Sequence(lambda n: f"ns-{n}")
    owner_type = "team"
    owner_id = 0
    desired = factory.LazyAttribute(
        lambda o: {"apiVersion": o.api_version, "kind": o.kind, "metadata": {"name": o.name}}
    )


class AuditEventFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = AuditEvent

    actor = factory.SubFactory(UserFactory)
    verb = "team.change"
    object_type = "team"
    team = factory.SubFactory(TeamFactory)
    department = factory.LazyAttribute(lambda e: e.team.department if e.team else None)


class ApprovalPolicyFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ApprovalPolicy

    max_gpus_without_approval = 16


class JobTemplateFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = JobTemplate

    team = factory.SubFactory(TeamFactory)
    name = factory.Sequence(lambda n: f"template-{n}")
    spec = factory.LazyFunction(lambda: {
        "name": "train", "image": "ghcr.io/acme/train:1.0", "command": ["python", "train.py"],
        "workers": 1, "gpus_per_worker": 1, "pool": "any", "max_runtime_seconds": 3600,
    })  # fmt: skip
    created_by = factory.SubFactory(UserFactory)


class SweepFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Sweep

    team = factory.SubFactory(TeamFactory)
    name = factory.Sequence(lambda n: f"sweep-{n}")
    owner = factory.SubFactory(UserFactory)
    grid = factory.LazyFunction(lambda: {"env": {"LR": ["0.1", "0.01"]}})


class JobFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Job

    team = factory.SubFactory(TeamFactory)
    owner = factory.SubFactory(UserFactory)
    name = factory.Sequence(lambda n: f"train-{n}")
    k8s_name = factory.LazyAttribute(lambda j: j.name)
    image = "ghcr.io/acme/train:1.0"
    command = factory.LazyFunction(lambda: ["python", "train.py"])
    tier = factory.SubFactory(PriorityTierFactory)
    max_runtime_seconds = 3600
    state = Job.State.QUEUED


class JobTransitionFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = JobTransition

    job = factory.SubFactory(JobFactory)
    from_state = Job.State.SUBMITTED
    to_state = Job.State.QUEUED
    at = factory.LazyFunction(timezone.now)


class JobPodFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = JobPod

    job = factory.SubFactory(JobFactory)
    name = factory.Sequence(lambda n: f"pod-{n}")
    namespace = factory.LazyAttribute(lambda p: p.job.team.namespace)
    gpus = 1


class LogStreamFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = LogStream

    job = factory.SubFactory(JobFactory)
    user = factory.LazyAttribute(lambda s: s.job.owner)


# --- billing ----------------------------------------------------------------------------------
# Cluster is fleet's; billing rows that need one get a shared default.

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


class LedgerHourFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = LedgerHour

    hour = factory.Sequence(lambda n: datetime(2026, 10, 1, tzinfo=UTC) + timedelta(hours=n))
    pool = factory.SubFactory(NodePoolFactory)
    cluster = factory.SelfAttribute("pool.cluster")
    team = factory.SubFactory(TeamFactory)
    borrowed_seconds = 1800
    samples = 30


class LedgerStateFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = LedgerState

    cluster = factory.SubFactory(ClusterFactory)
    last_sample_at = factory.LazyFunction(timezone.now)


class IdleWatchStateFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = IdleWatchState

    cluster = factory.SubFactory(ClusterFactory)
    observed_at = factory.LazyFunction(timezone.now)


class LedgerRateFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = LedgerRate

    rate_per_gpu_hour = Decimal("0.5000")
    effective_from = factory.Sequence(
        lambda n: datetime(2026, 1, 1, tzinfo=UTC) + timedelta(days=n)
    )


class EnergySettingsFactory(factory.django.DjangoModelFactory):
    """The site's one row (pk 1)."""

    class Meta:
        model = EnergySettings
        django_get_or_create = ("id",)

    id = 1
    pue = Decimal("1.20")
    grams_per_kwh = Decimal("400.0")


class CarbonIntensityHourFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = CarbonIntensityHour

    hour = factory.Sequence(lambda n: datetime(2026, 10, 1, tzinfo=UTC) + timedelta(hours=n))
    grams_per_kwh = 350.0


class GpuHealthFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = GpuHealth

    cluster = factory.SubFactory(ClusterFactory)
    node_name = factory.Sequence(lambda n: f"gpu-node-{n}")
    gpu_uuid = factory.Sequence(lambda n: f"GPU-{n:08d}")
    observed_at = factory.LazyFunction(timezone.now)
    state_since = factory.LazyFunction(timezone.now)


class GpuHealthEventFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = GpuHealthEvent

    cluster = factory.SubFactory(ClusterFactory)
    node_name = factory.Sequence(lambda n: f"gpu-node-{n}")
    gpu_uuid = factory.Sequence(lambda n: f"GPU-{n:08d}")
    at = factory.LazyFunction(timezone.now)
    state = GpuHealth.State.FAILED
    reason = "XID 79 reported by the driver"


class GpuFaultFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = GpuFault

    cluster = factory.SubFactory(ClusterFactory)
    node_name = factory.Sequence(lambda n: f"gpu-node-{n}")
    gpu_uuid = factory.Sequence(lambda n: f"GPU-{n:08d}")
    xid = 79
    reason = "XID 79 reported by the driver"
    detected_at = factory.LazyFunction(timezone.now)


class GpuFaultCreditFactory(factory.django.DjangoModelFactory):
    """A job a fault stopped, credited 1 GPU-hour at 3.00."""

    class Meta:
        model = GpuFaultCredit

    fault = factory.SubFactory(GpuFaultFactory)
    job = factory.SubFactory(JobFactory)
    team = factory.SelfAttribute("job.team")
    gpu_seconds_lost = 3600
    price_per_hour = Decimal("3.0000")
    amount = Decimal("3.00")


class JobCheckpointFactory(factory.django.DjangoModelFactory):
    """A checkpoint a running job reported through the API a minute ago."""

    class Meta:
        model = JobCheckpoint

    job = factory.SubFactory(JobFactory, state=Job.State.RUNNING)
    at = factory.LazyFunction(lambda: timezone.now() - timedelta(minutes=1))
    step = 1000
    path = "/checkpoints/step-1000"


class JobPreemptionFactory(factory.django.DjangoModelFactory):
    """A job preempted on 2 GPUs 30 minutes into its run, 10 minutes after its last checkpoint."""

    class Meta:
        model = JobPreemption

    job = factory.SubFactory(JobFactory)
    team = factory.SelfAttribute("job.team")
    at = factory.LazyFunction(timezone.now)
    run_started_at = factory.LazyAttribute(lambda o: o.at - timedelta(minutes=30))
    checkpoint_at = factory.LazyAttribute(lambda o: o.at - timedelta(minutes=10))
    gpus = 2
    lost_gpu_seconds = 2 * 600


class TeamVolumeFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = TeamVolume

    team = factory.SubFactory(TeamFactory)
    cluster = factory.SubFactory(ClusterFactory)
    name = factory.Sequence(lambda n: f"volume-{n}")
    size_gib = 10


class TeamSecretFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = TeamSecret

    team = factory.SubFactory(TeamFactory)
    cluster = factory.SubFactory(ClusterFactory)
    name = factory.Sequence(lambda n: f"secret-{n}")
    keys = factory.LazyFunction(lambda: ["token"])
    fingerprint = "0" * 64


class JobEventFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = JobEvent

    job = factory.SubFactory(JobFactory)
    type = "Normal"
    reason = "Scheduled"
    message = "Successfully assigned vision/train-1-0 to a100-node-0"
    object = "Pod/train-1-0"


class IdentityFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Identity

    user = factory.SubFactory(UserFactory)
    issuer = "https://id.example.org"
    subject = factory.Sequence(lambda n: f"subject-{n}")
    linked = Identity.Linked.CREATED
