"""Jobs: what researchers submit, its life in the cluster, and the pods it ran."""

from datetime import timedelta

from django.conf import settings
from django.db import models
from django.db.models import Q

from fleet.models import Cluster, NodePool
from fleet.quantities import cpu_text, memory_text
from queues.models.quotas import PriorityTier
from queues.models.tenancy import Team


class Sweep(models.Model):
    """One submission over a grid of parameters: the jobs it made share it."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="sweeps")
    name = models.CharField(max_length=200)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    # {"env": {"LR": ["0.1", "0.01"]}, "args": {"--batch": ["32", "64"]}}
    grid = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self):
        return f"{self.name} (sweep #{self.pk})"


class Job(models.Model):
    """A GPU job: desired spec, state with a timestamp per transition, cluster identity."""

    class State(models.TextChoices):
        DRAFT = "draft", "Draft"
        PENDING_APPROVAL = "pending_approval", "Waiting for approval"
        SUBMITTED = "submitted", "Submitted"
        QUEUED = "queued", "Queued"
        ADMITTED = "admitted", "Admitted"
        RUNNING = "running", "Running"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"
        PREEMPTED = "preempted", "Preempted"
        CANCELLED = "cancelled", "Cancelled"
        REJECTED = "rejected", "Rejected"

    FINAL_STATES = ("succeeded", "failed", "cancelled", "rejected")

    class Placement(models.TextChoices):
        REQUIRED = "required", "Required"
        PREFERRED = "preferred", "Preferred"

    class Kind(models.TextChoices):
        JOB = "job", "Job"
        PYTORCHJOB = "pytorchjob", "PyTorchJob"
        JOBSET = "jobset", "JobSet"

    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="jobs")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="jobs"
    )
    name = models.CharField(max_length=200)
    # What the job becomes in a Kueue cluster: a batch/v1 Job, a Kubeflow PyTorchJob (a master
    # and workers-1 workers) or a JobSet (the workers, and a CPU driver when driver_command is
    # given, whose completion completes the JobSet).
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.JOB)
    driver_command = models.JSONField(default=list, blank=True)
    k8s_name = models.CharField(max_length=63, blank=True)
    # The Kueue LocalQueue it was submitted to: its owner's own when its team shared the queue
    # fairly among members at the time; "" for the team's LocalQueue.
    local_queue = models.CharField(max_length=63, blank=True)
    image = models.CharField(max_length=500)
    command = models.JSONField(default=list)
    args = models.JSONField(default=list, blank=True)
    env = models.JSONField(default=dict, blank=True)
    workers = models.PositiveIntegerField(default=1)
    gpus_per_worker = models.PositiveIntegerField(default=1)
    # Per worker, resolved at submission (the pool's share per GPU when the job did not say);
    # 0 on jobs from before they were set, which request none.
    cpu_millis = models.PositiveIntegerField(default=0)
    memory_mib = models.PositiveIntegerField(default=0)
    # Size of /dev/shm (a memory-backed emptyDir); None: the container runtime's 64 MiB.
    shm_mib = models.PositiveIntegerField(null=True, blank=True)
    # Team volumes mounted in every worker: [{"volume": name, "mount_path": "/data",
    # "read_only": false}]; env vars from team secrets: {"NAME": {"secret": s, "key": k}}.
    volumes = models.JSONField(default=list, blank=True)
    secret_env = models.JSONField(default=dict, blank=True)
    pool = models.ForeignKey(
        NodePool, on_delete=models.PROTECT, null=True, blank=True, related_name="jobs"
    )
    tier = models.ForeignKey(PriorityTier, on_delete=models.PROTECT, related_name="jobs")
    gang = models.BooleanField(default=True)
    # Keep the workers within one domain of the pool's topology level (its name, e.g. "rack"):
    # required (admitted only where one domain holds them all) or preferred (fewest domains).
    # Spot: an interruptible job may run on spot capacity (a reclaimed worker is replaced, not
    # counted as a failure); with a checkpoint (a team volume mounted at checkpoint_path, where
    # CHECKPOINT_DIR points) a replaced worker resumes instead of starting over.
    interruptible = models.BooleanField(default=False)
    checkpoint_volume = models.CharField(max_length=63, blank=True)
    checkpoint_path = models.CharField(max_length=200, blank=True)
    topology_level = models.CharField(max_length=63, blank=True)
    topology_mode = models.CharField(max_length=16, choices=Placement.choices, blank=True)
    max_runtime_seconds = models.PositiveIntegerField()
    # Failed worker pods the cluster re-runs before the job fails (batch/v1 backoffLimit), and
    # how many times it has re-run one so far (from the Job's status; at most the limit).
    retry_limit = models.PositiveSmallIntegerField(default=0)
    retries = models.PositiveIntegerField(default=0)
    expected_runtime_seconds = models.PositiveIntegerField(null=True, blank=True)
    cluster = models.ForeignKey(
        Cluster, on_delete=models.PROTECT, null=True, blank=True, related_name="jobs"
    )
    state = models.CharField(max_length=20, choices=State.choices, default=State.DRAFT)
    pending_reason = models.TextField(blank=True)
    queue_position = models.PositiveIntegerField(null=True, blank=True)
    estimated_start = models.DateTimeField(null=True, blank=True)
    estimate_basis = models.TextField(blank=True)
    admitted_pool = models.ForeignKey(
        NodePool, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    k8s_uid = models.CharField(max_length=64, blank=True)
    workload_name = models.CharField(max_length=253, blank=True)
    preemption_reason = models.TextField(blank=True)
    # How many times the scheduler preempted it, as recorded in its history (Kueue counts them
    # in the Workload's schedulingStats, so one the sync did not see is still recorded).
    preemptions = models.PositiveIntegerField(default=0)
    # Idle-GPU accountability (billing.services.idle): since when the job's GPUs have been
    # below its tier's threshold (None: busy), their mean utilisation in the last scrape, when
    # the owner was warned and when the policy suspended the job (its Workload inactive).
    idle_since = models.DateTimeField(null=True, blank=True)
    idle_util = models.FloatField(null=True, blank=True)
    idle_warned_at = models.DateTimeField(null=True, blank=True)
    idle_suspended_at = models.DateTimeField(null=True, blank=True)
    exit_reason = models.TextField(blank=True)
    # Preemption protection (queues.services.protection): the WorkloadPriorityClass the portal
    # last set on the job's object ("" = its tier's own), and the job's latest checkpoint.
    priority_class = models.CharField(max_length=63, blank=True)
    priority_class_applied = models.CharField(max_length=63, blank=True)
    last_checkpoint_at = models.DateTimeField(null=True, blank=True)
    apply_error = models.TextField(blank=True)
    # Cancelled, its objects not yet deleted from its cluster (disabled, or not answering): the
    # deletion is carried out when the cluster is enabled again, or by the reconciler.
    cluster_delete_pending = models.BooleanField(default=False)
    desired_generation = models.PositiveIntegerField(default=1)
    applied_generation = models.PositiveIntegerField(default=0)
    # Set while a worker applies the job, so that workers draining one cluster at once take
    # different jobs; a claim older than jobs.apply.APPLY_CLAIM_TTL is void (its worker died).
    apply_claimed_at = models.DateTimeField(null=True, blank=True)
    # "host:pid" of the worker process holding the claim: a worker that starts on that host
    # releases the claims of processes there that are gone, without waiting for the TTL.
    apply_claimed_by = models.CharField(max_length=300, blank=True)
    # The submitter's Idempotency-Key header: the same key from the same user is the same job.
    idempotency_key = models.CharField(max_length=200, blank=True)
    # A digest of what that submission asked for: the key sent again with other fields is
    # refused, not answered with this job (empty on jobs submitted before it was kept).
    idempotency_digest = models.CharField(max_length=64, blank=True)
    sweep = models.ForeignKey(
        Sweep, on_delete=models.SET_NULL, null=True, blank=True, related_name="jobs"
    )
    # Set when the job's cluster events were copied into JobEvent rows after it ended.
    events_kept_at = models.DateTimeField(null=True, blank=True)
    resubmitted_from = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="resubmissions"
    )
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    submitted_at = models.DateTimeField(null=True, blank=True)
    queued_at = models.DateTimeField(null=True, blank=True)
    admitted_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=Q(workers__gte=1), name="job_workers_positive"),
            models.UniqueConstraint(
                fields=["owner", "idempotency_key"],
                condition=~Q(idempotency_key=""),
                name="job_owner_idempotency_key",
            ),
            models.CheckConstraint(
                condition=Q(gpus_per_worker__gte=0), name="job_gpus_non_negative"
            ),
            models.CheckConstraint(
                condition=Q(max_runtime_seconds__gte=1), name="job_max_runtime_positive"
            ),
        ]
        indexes = [
            models.Index(fields=["team", "state"], name="job_team_state"),
            # The status sync reads a cluster's active jobs every few seconds.
            models.Index(fields=["cluster", "state"], name="job_cluster_state"),
            # Keyset pages of a user's and of a team's jobs, newest first, however many.
            models.Index(fields=["owner", "-id"], name="job_owner_newest"),
            models.Index(fields=["team", "-id"], name="job_team_newest"),
            # A team's queue waits in a month (team page, reports): read from the index alone.
            models.Index(
                fields=["team", "admitted_at"], include=["queued_at"], name="job_team_admitted"
            ),
        ]

    def __str__(self):
        return f"{self.name} ({self.state})"

    # The badge each state wears in lists and on the job page.
    STATE_BADGES = {
        "succeeded": "badge-ok", "running": "badge-ok", "failed": "badge-bad",
        "rejected": "badge-bad", "preempted": "badge-bad", "pending_approval": "badge-warn",
        "queued": "badge-warn",
    }  # fmt: skip

    @property
    def state_badge(self) -> str:
        return self.STATE_BADGES.get(self.state, "")

    @property
    def kind_text(self) -> str:
        """The object the job is in the cluster, with its parts."""
        if self.kind == self.Kind.PYTORCHJOB:
            workers = self.workers - 1
            return f"PyTorchJob: 1 master, {workers} worker{'s' if workers != 1 else ''}"
        if self.kind == self.Kind.JOBSET:
            driver = " and a driver" if self.driver_command else ""
            return f"JobSet: {self.workers} worker job{'s' if self.workers != 1 else ''}{driver}"
        return "Job"

    @property
    def worker_resources_text(self) -> str:
        """CPU, memory and /dev/shm per worker as quantities ("" for jobs from before)."""
        if not self.cpu_millis and not self.memory_mib:
            return ""
        parts = [f"{cpu_text(self.cpu_millis)} CPUs", f"{memory_text(self.memory_mib)} memory"]
        if self.shm_mib:
            parts.append(f"/dev/shm {memory_text(self.shm_mib)}")
        return ", ".join(parts)

    @property
    def total_gpus(self) -> int:
        return self.workers * self.gpus_per_worker

    @property
    def expected_end(self):
        """When a running job should end: start + expected runtime (else its maximum)."""
        if self.started_at is None:
            return None
        seconds = self.expected_runtime_seconds or self.max_runtime_seconds
        return self.started_at + timedelta(seconds=seconds)


class JobTransition(models.Model):
    """One state change of a job, with when and why (queue wait is a product feature)."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="transitions")
    from_state = models.CharField(max_length=20, blank=True)
    to_state = models.CharField(max_length=20)
    at = models.DateTimeField()
    reason = models.TextField(blank=True)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self):
        return f"{self.job_id}: {self.from_state} → {self.to_state}"

    @property
    def to_state_label(self) -> str:
        return Job.State(self.to_state).label if self.to_state in Job.State.values else ""


class JobPod(models.Model):
    """A pod a job ran: where, how many GPUs, when; billing joins DCGM metrics on it."""

    job = models.ForeignKey(Job, on_delete=models.PROTECT, related_name="pods")
    name = models.CharField(max_length=253)
    namespace = models.CharField(max_length=63)
    node_name = models.CharField(max_length=253, blank=True)
    gpus = models.PositiveIntegerField(default=0)
    gpu_uuids = models.JSONField(default=list, blank=True)
    phase = models.CharField(max_length=32, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # The end of the pod's log, kept when it ended, so it stays readable after the pod is gone.
    log_tail = models.TextField(blank=True)
    # Stopped because its node was taken back (a spot reclaim, a node shutdown: the pod's
    # DisruptionTarget condition), not by its own failure.
    interrupted = models.BooleanField(default=False)

    class Meta:
        ordering = ["job_id", "name"]
        constraints = [
            models.UniqueConstraint(fields=["namespace", "name"], name="jobpod_unique_name"),
        ]

    def __str__(self):
        return self.name


class JobEvent(models.Model):
    """A Kubernetes Event of a finished job's objects, kept when the job ended (the cluster
    drops events after an hour, and with the objects), so its timeline stays whole."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField(null=True, blank=True)
    type = models.CharField(max_length=16, blank=True)
    reason = models.CharField(max_length=128, blank=True)
    message = models.TextField(blank=True)
    object = models.CharField(max_length=300, blank=True)
    count = models.PositiveIntegerField(default=1)

    class Meta:
        ordering = ["job_id", "at", "id"]

    def __str__(self):
        return f"{self.job_id}: {self.reason}"


class ApprovalPolicy(models.Model):
    """When a job waits for its team lead: tiers, GPU count or runtime above thresholds."""

    tiers_needing_approval = models.ManyToManyField(PriorityTier, blank=True, related_name="+")
    max_gpus_without_approval = models.PositiveIntegerField(null=True, blank=True)
    max_runtime_seconds_without_approval = models.PositiveIntegerField(null=True, blank=True)
    # Registries job images may come from (host[:port]; "docker.io" for Docker Hub); empty: any.
    allowed_registries = models.JSONField(default=list, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "approval policy"

    def __str__(self):
        return "Job approval policy"


class JobTemplate(models.Model):
    """A team's saved job spec (the submission's fields), to start new jobs from."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="job_templates")
    name = models.CharField(max_length=100)
    spec = models.JSONField(default=dict)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["team", "name"]
        constraints = [
            models.UniqueConstraint(fields=["team", "name"], name="jobtemplate_unique_name")
        ]

    def __str__(self):
        return f"{self.team.slug}/{self.name}"
