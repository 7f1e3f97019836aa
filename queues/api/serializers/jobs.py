"""API serializers for jobs: a loose input shape (the service validates), a full output shape."""

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from fleet.quantities import cpu_text, memory_text
from queues.models import (
    ApprovalPolicy,
    Job,
    JobPod,
    JobTemplate,
    JobTransition,
    PriorityTier,
    Sweep,
)
from queues.selectors.environment import env_hidden, env_readable, env_readers


class JobSubmitSerializer(serializers.Serializer):
    """What POST /api/v1/jobs/ accepts; types are checked here, meaning in job_submit."""

    team = serializers.CharField(required=False, allow_blank=True, max_length=63)
    name = serializers.CharField(max_length=200)
    image = serializers.CharField(max_length=500)
    command = serializers.JSONField()
    args = serializers.JSONField(required=False, default=list)
    env = serializers.JSONField(required=False, default=dict)
    workers = serializers.IntegerField(required=False, default=1)
    gpus_per_worker = serializers.IntegerField(
        required=False, default=1,
        help_text="GPUs of the pool per worker: in a MIG pool, instances of its profile; in a "
        "time-sliced pool, shares, and at most 1 (more gives no more GPU, and the device plugin "
        "may refuse it).",
    )  # fmt: skip
    pool = serializers.CharField(required=False, allow_blank=True, allow_null=True, default=None)
    tier = serializers.CharField(required=False, allow_blank=True, allow_null=True, default=None)
    gang = serializers.BooleanField(required=False, default=True)
    max_runtime_seconds = serializers.IntegerField()
    expected_runtime_seconds = serializers.IntegerField(required=False, allow_null=True)
    retry_limit = serializers.IntegerField(
        required=False, default=0,
        help_text="Retries before the job fails, 0 to 10 (Kueue clusters). A Job runs a failed "
        "worker again in a new pod, a PyTorchJob restarts its container in place (same pod and "
        "GPUs); both count failures over all workers, so workers that fail together use one "
        "each. A JobSet restarts all its workers, and counts those restarts.",
    )  # fmt: skip
    cpu = serializers.CharField(
        required=False, allow_blank=True, allow_null=True, default=None, max_length=32,
        help_text='CPUs per worker as a Kubernetes quantity ("8", "500m"); empty: the pool\'s '
        "share per GPU. At most what the pool's largest node has.",
    )  # fmt: skip
    memory = serializers.CharField(
        required=False, allow_blank=True, allow_null=True, default=None, max_length=32,
        help_text='Memory per worker ("64Gi"); empty: the pool\'s share per GPU.',
    )  # fmt: skip
    shm_size = serializers.CharField(
        required=False, allow_blank=True, allow_null=True, default=None, max_length=32,
        help_text='Size of /dev/shm ("8Gi"), held in the worker\'s memory; empty: 64Mi.',
    )  # fmt: skip
    volumes = serializers.JSONField(
        required=False, default=list,
        help_text='Team volumes to mount: [{"volume": "datasets", "mount_path": "/data", '
        '"read_only": true}].',
    )  # fmt: skip
    secret_env = serializers.JSONField(
        required=False, default=dict,
        help_text='Environment variables from team secrets: {"WANDB_API_KEY": "wandb/api-key"}.',
    )  # fmt: skip
    interruptible = serializers.BooleanField(
        required=False, default=False,
        help_text="May run on spot capacity: a worker whose node is taken back is replaced "
        "(not counted as a failure). Required in spot pools.",
    )  # fmt: skip
    checkpoint_volume = serializers.CharField(
        required=False, allow_blank=True, allow_null=True, default=None, max_length=63,
        help_text="A team volume for checkpoints: mounted at checkpoint_path, CHECKPOINT_DIR "
        "set; a replaced worker resumes from it.",
    )  # fmt: skip
    checkpoint_path = serializers.CharField(
        required=False, allow_blank=True, allow_null=True, default=None, max_length=200,
        help_text='Where the checkpoints are (default "/checkpoints").',
    )  # fmt: skip
    kind = serializers.ChoiceField(
        choices=Job.Kind.choices, required=False, default=Job.Kind.JOB,
        help_text="job: a batch/v1 Job; pytorchjob: a Kubeflow PyTorchJob (a master and "
        "workers-1 workers, rendezvous set by the operator); jobset: a JobSet of the workers "
        "(and a driver, with driver_command). The last two on Kueue clusters.",
    )  # fmt: skip
    driver_command = serializers.JSONField(
        required=False, default=list,
        help_text='JobSet only: the driver\'s command (one CPU pod), e.g. ["python", '
        '"driver.py"]; the JobSet completes when the driver does.',
    )  # fmt: skip
    topology_level = serializers.CharField(
        required=False, allow_blank=True, allow_null=True, default=None, max_length=63,
        help_text='Keep the workers within one domain of this level of the pool\'s topology '
        '("rack"; the pool\'s topology_levels name them). Needs a pool.',
    )  # fmt: skip
    topology_mode = serializers.ChoiceField(
        choices=Job.Placement.choices, required=False, allow_blank=True, allow_null=True,
        default=None,
        help_text="required (default): wait until one domain holds every worker; preferred: "
        "one domain if there is room, else as few as possible.",
    )  # fmt: skip


class JobPodSerializer(serializers.ModelSerializer):
    class Meta:
        model = JobPod
        fields = [
            "name", "namespace", "node_name", "gpus", "gpu_uuids", "phase", "exit_code",
            "started_at", "finished_at",
        ]  # fmt: skip


class JobTransitionSerializer(serializers.ModelSerializer):
    class Meta:
        model = JobTransition
        fields = ["from_state", "to_state", "at", "reason"]


def _env_readers(context: dict):
    """(team ids whose job environments the caller reads, reads every team's), computed once
    per response and kept in the serializer context, which list items share."""
    if "env_readers" not in context:
        request = context.get("request")
        context["env_readers"] = env_readers(user=getattr(request, "user", None))
    return context["env_readers"]


class JobSerializer(serializers.Serializer):
    """A job as the API shows it (read-only). Fields are declared, not derived from the model:
    a ModelSerializer rebuilds its 33 fields from the model on every use, half again the work
    of serializing the job itself."""

    id = serializers.IntegerField(read_only=True)
    url = serializers.HyperlinkedIdentityField(view_name="api-job-detail")
    name = serializers.CharField(read_only=True)
    team = serializers.CharField(source="team.slug", read_only=True)
    owner = serializers.CharField(source="owner.username", read_only=True)
    state = serializers.ChoiceField(choices=Job.State.choices, read_only=True)
    image = serializers.CharField(read_only=True)
    command = serializers.ListField(child=serializers.CharField(), read_only=True)
    args = serializers.ListField(child=serializers.CharField(), read_only=True)
    env = serializers.SerializerMethodField(
        help_text="NAME to value; the values are null for people outside the job's team "
        "(finance, managers): only the team and platform admins read them."
    )
    workers = serializers.IntegerField(read_only=True)
    gpus_per_worker = serializers.IntegerField(read_only=True)
    pool = serializers.CharField(source="pool.name", read_only=True, allow_null=True)
    tier = serializers.CharField(source="tier.name", read_only=True)
    gang = serializers.BooleanField(read_only=True)
    max_runtime_seconds = serializers.IntegerField(read_only=True)
    expected_runtime_seconds = serializers.IntegerField(read_only=True, allow_null=True)
    retry_limit = serializers.IntegerField(read_only=True)
    retries = serializers.IntegerField(
        read_only=True,
        help_text="Times the cluster has re-run a failed worker (at most the limit).",
    )
    cpu = serializers.SerializerMethodField(help_text="CPUs per worker (a quantity).")
    memory = serializers.SerializerMethodField(help_text="Memory per worker (a quantity).")
    shm_size = serializers.SerializerMethodField(help_text="Size of /dev/shm, or null.")
    topology_level = serializers.CharField(
        read_only=True, help_text="Topology level the workers are kept within, or empty."
    )
    topology_mode = serializers.CharField(read_only=True, help_text="required, preferred or empty.")
    kind = serializers.ChoiceField(choices=Job.Kind.choices, read_only=True)
    driver_command = serializers.ListField(child=serializers.CharField(), read_only=True)
    interruptible = serializers.BooleanField(read_only=True)
    checkpoint_volume = serializers.CharField(read_only=True)
    checkpoint_path = serializers.CharField(read_only=True)
    volumes = serializers.JSONField(read_only=True)
    secret_env = serializers.JSONField(
        read_only=True, help_text="Variables read from team secrets: secret and key names only."
    )
    k8s_name = serializers.CharField(read_only=True)
    admitted_pool = serializers.CharField(
        source="admitted_pool.name", read_only=True, allow_null=True
    )
    pending_reason = serializers.SerializerMethodField(
        help_text="Why the job waits, while it does: for a submitted job what holds it back "
        "before it reaches the cluster (the cluster, the message broker, the workers, the last "
        "try), else what the scheduler says."
    )
    queue_position = serializers.IntegerField(read_only=True, allow_null=True)
    estimated_start = serializers.DateTimeField(read_only=True, allow_null=True)
    estimate_basis = serializers.CharField(read_only=True)
    priority_class = serializers.CharField(
        read_only=True,
        help_text="The WorkloadPriorityClass the portal set while the job runs (preemption "
        "protection; empty: its tier's own). GET .../protection/ tells why.",
    )
    last_checkpoint_at = serializers.DateTimeField(read_only=True, allow_null=True)
    preemption_reason = serializers.CharField(read_only=True)
    preemptions = serializers.IntegerField(
        read_only=True, help_text="How many times the scheduler preempted the job."
    )
    cluster_delete_pending = serializers.BooleanField(
        read_only=True,
        help_text="Cancelled, its objects not yet deleted from its cluster (while the cluster "
        "is disabled or does not answer; deleted when it is enabled or answers again).",
    )
    idle_since = serializers.DateTimeField(
        read_only=True, allow_null=True,
        help_text="Since when the running job's GPUs have been below its tier's idle threshold.",
    )  # fmt: skip
    idle_util = serializers.FloatField(
        read_only=True, allow_null=True, help_text="Mean GPU utilisation (%) at the last scrape."
    )
    idle_warned_at = serializers.DateTimeField(read_only=True, allow_null=True)
    idle_suspended_at = serializers.DateTimeField(
        read_only=True, allow_null=True,
        help_text="When the idle-GPU policy suspended the job (POST .../resume/ to resume it).",
    )  # fmt: skip
    exit_reason = serializers.CharField(read_only=True)
    apply_error = serializers.CharField(read_only=True)
    resubmitted_from = serializers.IntegerField(
        source="resubmitted_from_id", read_only=True, allow_null=True
    )
    created_at = serializers.DateTimeField(read_only=True)
    submitted_at = serializers.DateTimeField(read_only=True, allow_null=True)
    queued_at = serializers.DateTimeField(read_only=True, allow_null=True)
    admitted_at = serializers.DateTimeField(read_only=True, allow_null=True)
    started_at = serializers.DateTimeField(read_only=True, allow_null=True)
    finished_at = serializers.DateTimeField(read_only=True, allow_null=True)

    def get_pending_reason(self, job) -> str:
        from queues.selectors.jobs import job_cancel_wait, job_submitted_wait, wait_facts

        if job.state == Job.State.CANCELLED and job.cluster_delete_pending:
            return job_cancel_wait(job=job)
        if job.state != Job.State.SUBMITTED:
            return job.pending_reason

        # Read once for the whole page: the broker's kept messages and the workers' heartbeat.
        facts = self.context.get("wait_facts")
        if facts is None:
            facts = self.context["wait_facts"] = wait_facts()
        return job_submitted_wait(job=job, facts=facts)

    def get_cpu(self, job) -> str | None:
        return cpu_text(job.cpu_millis) if job.cpu_millis else None

    def get_memory(self, job) -> str | None:
        return memory_text(job.memory_mib) if job.memory_mib else None

    def get_shm_size(self, job) -> str | None:
        return memory_text(job.shm_mib) if job.shm_mib else None

    @extend_schema_field(serializers.DictField(child=serializers.CharField(allow_null=True)))
    def get_env(self, job) -> dict:
        if env_readable(_env_readers(self.context), job.team_id):
            return dict(job.env)
        return dict.fromkeys(job.env)


class JobEventSerializer(serializers.Serializer):
    at = serializers.DateTimeField(allow_null=True)
    type = serializers.CharField()
    reason = serializers.CharField()
    message = serializers.CharField()
    object = serializers.CharField()
    count = serializers.IntegerField()


class JobDetailSerializer(JobSerializer):
    pods = JobPodSerializer(many=True, read_only=True)
    transitions = JobTransitionSerializer(many=True, read_only=True)
    events = serializers.SerializerMethodField(
        help_text="Kubernetes Events of the job's objects, as the cluster recorded them."
    )

    @extend_schema_field(JobEventSerializer(many=True))
    def get_events(self, job) -> list:
        from queues.services.jobs.events import job_events

        return JobEventSerializer(job_events(job=job), many=True).data


class RejectSerializer(serializers.Serializer):
    reason = serializers.CharField(required=False, allow_blank=True, max_length=2000)


class ApprovalPolicySerializer(serializers.ModelSerializer):
    tiers_needing_approval = serializers.SlugRelatedField(
        slug_field="name", many=True, queryset=PriorityTier.objects.all(), required=False
    )
    max_gpus_without_approval = serializers.IntegerField(
        min_value=0, allow_null=True, required=False
    )
    max_runtime_seconds_without_approval = serializers.IntegerField(
        min_value=1, allow_null=True, required=False
    )
    allowed_registries = serializers.ListField(
        child=serializers.CharField(max_length=260), max_length=100, required=False,
        help_text="Registries job images may come from (e.g. ghcr.io, nvcr.io; docker.io for "
        "Docker Hub); empty: any.",
    )  # fmt: skip

    class Meta:
        model = ApprovalPolicy
        fields = [
            "tiers_needing_approval",
            "max_gpus_without_approval",
            "max_runtime_seconds_without_approval",
            "allowed_registries",
            "updated_at",
        ]
        read_only_fields = ["updated_at"]


class JobTemplateSerializer(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    created_by = serializers.CharField(
        source="created_by.username", read_only=True, allow_null=True
    )
    spec = serializers.JSONField(
        read_only=True,
        help_text="The submission's fields; env values are null for people outside the team "
        "(as on jobs).",
    )

    class Meta:
        model = JobTemplate
        fields = ["id", "team", "name", "spec", "created_by", "created_at"]
        read_only_fields = fields

    def to_representation(self, template):
        data = super().to_representation(template)
        if not env_readable(_env_readers(self.context), template.team_id):
            data["spec"] = env_hidden(data["spec"])
        return data


class JobTemplateCreateSerializer(serializers.Serializer):
    team = serializers.SlugField(required=False, allow_blank=True, default="")
    name = serializers.CharField(max_length=100)
    from_job = serializers.IntegerField(
        required=False, allow_null=True, default=None,
        help_text="Save this job's spec (its team's template); else give `spec`.",
    )  # fmt: skip
    spec = serializers.JSONField(
        required=False, default=dict,
        help_text="The fields of a job submission (name, image, command, ...).",
    )  # fmt: skip


class SweepSubmitSerializer(JobSubmitSerializer):
    grid = serializers.JSONField(
        help_text='Values per env variable and per argument, e.g. {"env": {"LR": ["0.1", '
        '"0.01"]}, "args": {"--batch": ["32", "64"]}}: one job per combination (at most 100).'
    )


class SweepJobSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="job.pk")
    name = serializers.CharField(source="job.name")
    state = serializers.CharField(source="job.state")
    runtime_seconds = serializers.IntegerField(allow_null=True)
    cost = serializers.DecimalField(max_digits=14, decimal_places=2, allow_null=True)
    currency = serializers.CharField(allow_null=True)


class SweepSerializer(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    owner = serializers.CharField(source="owner.username", read_only=True)
    jobs = serializers.SerializerMethodField()

    grid = serializers.JSONField(
        read_only=True,
        help_text="Values per env variable and per argument; env values are null for people "
        "outside the team (as on jobs).",
    )

    class Meta:
        model = Sweep
        fields = ["id", "team", "name", "owner", "grid", "created_at", "jobs"]
        read_only_fields = fields

    def to_representation(self, sweep):
        data = super().to_representation(sweep)
        if not env_readable(_env_readers(self.context), sweep.team_id):
            data["grid"] = env_hidden(data["grid"])
        return data

    @extend_schema_field(SweepJobSerializer(many=True))
    def get_jobs(self, sweep) -> list:
        from queues.selectors.jobs import sweep_jobs

        return SweepJobSerializer(sweep_jobs(sweep=sweep), many=True).data
